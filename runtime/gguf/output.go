package gguf

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
)

// OutputFile is a model file being written: a buffered temporary file in the
// destination's directory that Commit renames into place, so a failed or
// interrupted writer never leaves a truncated model under the final name.
// Close removes the temporary file unless Commit succeeded; defer it right
// after CreateOutput. An OutputFile is not safe for concurrent use.
type OutputFile struct {
	path      string
	tmp       *os.File
	bw        *bufio.Writer
	committed bool
}

// CreateOutput starts writing the model file path.
func CreateOutput(path string) (*OutputFile, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, err
	}
	return &OutputFile{path: path, tmp: tmp, bw: bufio.NewWriterSize(tmp, 1<<20)}, nil
}

// Write buffers p for the temporary file.
func (o *OutputFile) Write(p []byte) (int, error) { return o.bw.Write(p) }

// Commit flushes the file, makes it world-readable (CreateTemp makes 0600;
// a model is not secret) and renames it to the destination path.
func (o *OutputFile) Commit() error {
	if err := o.bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", o.path, err)
	}
	if err := o.tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", o.path, err)
	}
	if err := o.tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", o.path, err)
	}
	if err := os.Rename(o.tmp.Name(), o.path); err != nil {
		return err
	}
	o.committed = true
	return nil
}

// Close discards the temporary file unless Commit succeeded. It is safe to
// call after Commit.
func (o *OutputFile) Close() {
	if o.committed {
		return
	}
	o.tmp.Close()
	os.Remove(o.tmp.Name())
}
