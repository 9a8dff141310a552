"""Ways in from outside: the HTTP client, the MCP server, and retrievers for LangChain and LlamaIndex."""
