// Package gguf reads and writes GGUF files, the model format of llama.cpp:
// the header's metadata key-value pairs and tensor infos, parsed from
// untrusted input with every count and length bounds-checked before
// anything is allocated, and per-tensor random access to the data
// (File.TensorReader, an io.SectionReader). The writer emits GGUF v3
// through a temporary file committed by rename (CreateOutput).
package gguf
