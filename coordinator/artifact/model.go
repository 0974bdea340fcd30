package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// MaxHeaderBytes bounds the part of a file ReadModelFacts reads: the GGUF
// header (metadata and tensor infos) must end within it. Real headers are
// a few MiB (mostly the tokenizer's vocabulary, which runtime/gguf skips
// without decoding); the bound keeps a hostile header from making the
// coordinator read or allocate much. Memory used while parsing stays
// below this window plus one string of gguf.MaxStringLen.
const MaxHeaderBytes = 64 << 20

// errHeaderWindow is returned by reads past MaxHeaderBytes.
var errHeaderWindow = fmt.Errorf("GGUF header is larger than %d bytes", MaxHeaderBytes)

// windowReader serves reads of the first n bytes of r and fails beyond.
type windowReader struct {
	r io.ReaderAt
	n int64
}

func (w windowReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= w.n {
		return 0, errHeaderWindow
	}
	if rest := w.n - off; int64(len(p)) > rest {
		n, err := w.r.ReadAt(p[:rest], off)
		if err == nil {
			err = errHeaderWindow
		}
		return n, err
	}
	return w.r.ReadAt(p, off)
}

// ReadModelFacts reads the GGUF header of a file of size bytes from r and
// returns what an agent needs to decide whether it can run the model:
// architecture, expert counts, tensor types and the resident and expert
// bytes. It never reads tensor data, nor more than MaxHeaderBytes. It
// returns nil and no error when the content is not GGUF (wrong magic, or
// shorter than a GGUF header), and an error when it is GGUF but the header
// is malformed or lacks general.architecture. It never panics.
func ReadModelFacts(r io.ReaderAt, size int64) (*protocol.ModelFacts, error) {
	var magic [4]byte
	if size < 24 {
		return nil, nil
	}
	if _, err := r.ReadAt(magic[:], 0); err != nil {
		return nil, fmt.Errorf("artifact: read header: %w", err)
	}
	if string(magic[:]) != "GGUF" {
		return nil, nil
	}
	f, err := gguf.Parse(windowReader{r: r, n: MaxHeaderBytes}, size)
	if err != nil {
		return nil, err
	}
	v, ok := f.Value("general.architecture")
	arch, isStr := v.Str()
	switch {
	case !ok || !isStr || arch == "":
		return nil, errors.New("gguf: general.architecture missing or not a string")
	case len(arch) > protocol.MaxArchitecture || strings.ContainsFunc(arch, func(r rune) bool { return r < 0x20 || r > 0x7e }):
		return nil, fmt.Errorf("gguf: general.architecture %q is not a short printable name", clipName(arch))
	}
	facts := &protocol.ModelFacts{Architecture: arch, ExpertCount: metaCount(f, arch+".expert_count"), ExpertsUsed: metaCount(f, arch+".expert_used_count"),
		ContextLength: metaCount(f, arch+".context_length")}
	if arch == "qwen35moe" {
		if facts.Recurrent, err = qwen35Facts(f); err != nil {
			return nil, fmt.Errorf("gguf: %w", err)
		}
	}
	types := map[string]bool{}
	for _, t := range f.Tensors() {
		types[t.Type.String()] = true
		facts.Tensors++
		facts.TotalBytes = satAdd(facts.TotalBytes, t.Size)
		if isExpertTensor(t.Name) {
			facts.ExpertBytes = satAdd(facts.ExpertBytes, t.Size)
		}
	}
	facts.ResidentBytes = facts.TotalBytes - facts.ExpertBytes
	for t := range types {
		facts.TensorTypes = append(facts.TensorTypes, t)
	}
	slices.Sort(facts.TensorTypes)
	if facts.TensorTypes == nil {
		facts.TensorTypes = []string{}
	}
	facts.MoE = facts.ExpertCount > 0 || facts.ExpertBytes > 0
	for _, kv := range f.KVs() {
		if strings.HasPrefix(kv.Key, "les.pack.") {
			facts.Packed = true
			break
		}
	}
	if err := facts.Validate(); err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	return facts, nil
}

// metaCount reads a non-negative integer key, or 0 when absent, of another
// type or out of range.
func metaCount(f *gguf.File, key string) int {
	v, ok := f.Value(key)
	if !ok {
		return 0
	}
	n, ok := v.Uint()
	if !ok || n > 1<<30 {
		return 0
	}
	return int(n)
}

// isExpertTensor reports whether name is a routed expert's weight: the
// stacked blk.L.ffn_{gate,up,down,gate_up}_exps.* of an ordinary GGUF
// (gate_up: llama.cpp's merged gate+up, as pack --layout compat writes it
// for qwen35moe), or the
// per-expert blk.L.ffn_{gate,up,down}.E.weight of a packed one (shared
// experts, *_shexp, stay resident).
func isExpertTensor(name string) bool {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return false
	}
	layer, rest, ok := strings.Cut(rest, ".")
	if !ok || !allDigits(layer) {
		return false
	}
	if strings.HasPrefix(rest, "ffn_gate_up_exps.") {
		return true
	}
	for _, part := range [...]string{"ffn_gate", "ffn_up", "ffn_down"} {
		tail, ok := strings.CutPrefix(rest, part)
		if !ok {
			continue
		}
		if strings.HasPrefix(tail, "_exps.") {
			return true
		}
		if e, ok := strings.CutPrefix(tail, "."); ok {
			idx, suffix, ok := strings.Cut(e, ".")
			return ok && allDigits(idx) && suffix == "weight"
		}
	}
	return false
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// RecordModelFacts reads the model facts of the stored file sha and saves
// them (or, for a GGUF whose header cannot be read, the reason) with the
// artifact's row, marking it analysed. A non-GGUF file is recorded as
// analysed with no facts. It returns the facts (nil for none) and an error
// only when the file or the database cannot be used; a bad header is not
// an error of RecordModelFacts.
func RecordModelFacts(ctx context.Context, st *store.Store, files *Files, sha string) (*protocol.ModelFacts, error) {
	fh, err := files.Open(sha)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	facts, ferr := ReadModelFacts(fh, fi.Size())
	p := &store.ArtifactModelParams{SHA256: sha, Facts: facts}
	if ferr != nil {
		p.Error = ferr.Error()
	}
	if err := st.SetArtifactModel(ctx, p); err != nil {
		return nil, err
	}
	return facts, nil
}
