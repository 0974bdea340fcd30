// Package model runs GGUF transformer models: an architecture registry, the
// loader that binds GGUF tensors to weights, a float32 KV cache and the
// forward pass (batched prefill and single-token decode).
//
// Architectures are peers behind one internal interface (arch.go): each
// owns its forward pass and per-sequence state, registers itself from its
// own file and shares the layers as components — RMSNorm, GQA attention
// with per-head q/k RMSNorm and NEOX RoPE (attention.go), the routed MoE
// block and lookahead predictor (forward.go, verifycut.go), the dense
// SwiGLU FFN, and Gated DeltaNet (deltanet.go). qwen3.go (dense) and
// qwen3moe.go are plain transformer stacks (stack.go); qwen35moe*.go is the
// hybrid DeltaNet/gated-attention stack with shared experts and an MTP
// block. Model and State are the shell every caller sees; adding an
// architecture is one new file set that touches no other architecture's.
//
// Expert weights are only ever reached through a moe.Source, so the LES
// expert store can replace RAM residency without touching this package.
package model

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Config holds the hyper-parameters of a model, read from GGUF metadata.
type Config struct {
	Arch        string
	Name        string
	Layers      int
	Hidden      int // embedding width
	Heads       int // query heads
	KVHeads     int // key/value heads (GQA)
	HeadDim     int // key/query head width
	ValueDim    int // value head width
	Vocab       int
	Context     int // training context length
	FFN         int // dense FFN width (0 for MoE-only)
	ExpertCount int // experts per layer (0 for dense)
	ExpertsUsed int // top-k
	ExpertFFN   int // per-expert FFN width
	RopeBase    float32
	RopeDim     int
	Eps         float32
}

// Options configures Load. The zero value loads everything into RAM and uses
// one thread.
type Options struct {
	// Threads is the number of threads for matrix products (default 1).
	Threads int
	// Experts, when non-nil, supplies the expert weights instead of reading
	// them into RAM. The loader then never reads expert tensors; it calls
	// Experts with the open file and one shape per layer (zero shapes for
	// layers without experts). The file may be packed (lesfarm pack,
	// les.pack.version set): its experts are then the per-expert tensors
	// blk.L.ffn_{gate,up,down}.E.weight, one blob per expert, which
	// expert.Open reads with one read each.
	Experts func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error)
	// GGUFLayout keeps every weight held in RAM in the file's byte layout.
	// By default the loader rearranges the types that have a faster layout
	// for this machine's kernels (tensor.Swizzle; products are bit-identical
	// either way). Code that swaps raw tensor bytes in and out of a loaded
	// model (the planner's sensitivity pass) sets it.
	GGUFLayout bool
}

// Layer holds the weights of one transformer block. MoE layers have Router
// set and get their experts from the model's Source; dense layers have
// Gate/Up/Down set.
type Layer struct {
	AttnNorm     []float32
	Q, K, V, O   tensor.Matrix
	QNorm, KNorm []float32 // per-head norms (nil if the architecture has none)
	FFNNorm      []float32

	Router         *tensor.Matrix // ffn_gate_inp: Experts rows × Hidden cols
	Gate, Up, Down *tensor.Matrix // dense SwiGLU FFN

	Shape moe.LayerShape // expert shapes (MoE layers)
}

// Model is a loaded model. The weights are read-only after Load, but the
// model's thread pool is shared by all its States, so a Model and its States
// must be used by one goroutine at a time.
type Model struct {
	Config
	Embed   tensor.Matrix
	OutNorm []float32
	Output  tensor.Matrix
	Layers  []Layer
	// Experts supplies expert weights (nil for dense models).
	Experts moe.Source
	// File is the GGUF file the model was loaded from (for the tokenizer).
	File *gguf.File
	// ResidentBytes is the size of the non-expert weights held in RAM.
	ResidentBytes int64
	// ExpertBytes is the total size of all expert weights in the file.
	ExpertBytes int64

	pool    *tensor.Pool
	threads int
	parMin  int // least work for a pool dispatch of a per-row step (rowpar.go)
	rope    *ropeTable
	closers []func() error
	arch    architecture // the forward pass of Arch (arch.go)
}

// ErrUnsupported is wrapped by Load errors that mean the file cannot be run
// by this runtime (not a valid GGUF, unknown architecture, unsupported
// tensor type, missing or misshapen tensor), as opposed to I/O failures.
var ErrUnsupported = errors.New("unsupported model")

type unsupportedError struct{ err error }

func (e *unsupportedError) Error() string        { return e.err.Error() }
func (e *unsupportedError) Unwrap() error        { return e.err }
func (e *unsupportedError) Is(target error) bool { return target == ErrUnsupported }

func unsupported(err error) error {
	var pe *fs.PathError
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &pe) {
		return err
	}
	return &unsupportedError{err}
}

// Builder binds a model of one architecture from an open GGUF file.
type Builder func(f *gguf.File, opts Options) (*Model, error)

var (
	regMu    sync.RWMutex
	registry = map[string]Builder{}
)

// Register makes an architecture available to Load under its GGUF
// general.architecture name. It panics on a duplicate name (a programming
// error caught at init).
func Register(arch string, b Builder) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[arch]; dup {
		panic("model: duplicate architecture " + arch)
	}
	registry[arch] = b
}

// Architectures returns the registered architecture names, sorted.
func Architectures() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Load opens the GGUF file at path and builds the model its
// general.architecture names. Errors name the file and the problem: a
// missing file, an unknown architecture, a missing tensor or an unsupported
// tensor type.
func Load(path string, opts Options) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, unsupported(fmt.Errorf("model: %w", err))
	}
	arch, err := metaString(f, "general.architecture")
	if err != nil {
		f.Close()
		return nil, unsupported(fmt.Errorf("model: %s: %w", path, err))
	}
	regMu.RLock()
	b, ok := registry[arch]
	regMu.RUnlock()
	if !ok {
		f.Close()
		return nil, unsupported(fmt.Errorf("model: %s: unknown architecture %q (supported: %s); use a model of a supported architecture", path, arch, strings.Join(Architectures(), ", ")))
	}
	m, err := b(f, opts)
	if err != nil {
		f.Close()
		return nil, unsupported(fmt.Errorf("model: %s: %w", path, err))
	}
	m.File = f
	m.closers = append(m.closers, f.Close)
	return m, nil
}

// Close releases the model's file and expert source (if it implements
// io.Closer).
func (m *Model) Close() error {
	var first error
	if c, ok := m.Experts.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	for i := len(m.closers) - 1; i >= 0; i-- {
		if err := m.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	m.closers = nil
	return first
}

// Threads returns the number of threads used for matrix products.
func (m *Model) Threads() int { return m.threads }

// IsMoE reports whether the model has expert layers.
func (m *Model) IsMoE() bool { return m.Experts != nil }

// ActiveBytesPerToken estimates the weight bytes read to decode one token:
// all resident matrices except the embedding table (one row is read), plus
// ExpertsUsed experts per MoE layer.
func (m *Model) ActiveBytesPerToken() int64 {
	var n int64
	row, _ := m.Embed.Type.RowSize(m.Embed.Cols)
	n += int64(row)
	n += int64(len(m.Output.Data))
	for _, l := range m.Layers {
		n += int64(len(l.Q.Data) + len(l.K.Data) + len(l.V.Data) + len(l.O.Data))
		if l.Router != nil {
			n += int64(len(l.Router.Data))
			n += int64(m.ExpertsUsed) * l.Shape.Bytes()
		}
		if l.Gate != nil {
			n += int64(len(l.Gate.Data) + len(l.Up.Data) + len(l.Down.Data))
		}
	}
	n += m.arch.extraBytes()
	return n
}

// FLOPsPerToken estimates the multiply-add FLOPs (2 per weight) of the
// matrix products for one decoded token at context length ctx.
func (m *Model) FLOPsPerToken(ctx int) float64 {
	var w float64
	for _, l := range m.Layers {
		w += float64(l.Q.Rows*l.Q.Cols + l.K.Rows*l.K.Cols + l.V.Rows*l.V.Cols + l.O.Rows*l.O.Cols)
		if l.Router != nil {
			w += float64(l.Router.Rows * l.Router.Cols)
			w += float64(float64(m.ExpertsUsed) * 3 * float64(l.Shape.Hidden*l.Shape.FFN))
		}
		if l.Gate != nil {
			w += float64(l.Gate.Rows*l.Gate.Cols + l.Up.Rows*l.Up.Cols + l.Down.Rows*l.Down.Cols)
		}
	}
	w += float64(m.Output.Rows * m.Output.Cols)
	w += m.arch.extraWeights()
	// Scores and weighted values: 2 products of Heads*HeadDim per cached position.
	attn := float64(2 * float64(m.Heads*m.HeadDim) * float64(ctx) * float64(len(m.Layers)))
	return float64(2*w) + float64(2*attn)
}
