"""One class per local embedding backend (torch, ONNX, static); `retrieval.embedder` picks one per config."""
