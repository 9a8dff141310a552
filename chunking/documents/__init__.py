"""Documents from files: walking a folder, reading one file, and the parsers per format family."""
