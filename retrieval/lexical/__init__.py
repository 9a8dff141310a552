"""Lexical analysis for BM25: analyzers per language, language detection, code terms, BM25 parameters."""
