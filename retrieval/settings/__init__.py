"""Settings: the project and its files, index configs and collections, names, search options, defaults."""
