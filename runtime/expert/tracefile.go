package expert

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
)

// TraceModel identifies the model a routing trace was recorded from: its
// name and architecture, and per layer the number of experts and the bytes
// of one expert. Two models whose TraceModels match route over the same
// experts of the same sizes, so a trace of one replays on the other.
type TraceModel struct {
	Name        string // general.name, may be empty
	Arch        string // general.architecture
	ExpertsUsed int    // experts per token
	Layers      []TraceLayer
}

// TraceLayer is one layer of a TraceModel.
type TraceLayer struct {
	Experts     int
	ExpertBytes int64 // bytes of one expert's gate, up and down (0 without experts)
}

// TraceModelOf returns the TraceModel of a model file and its expert
// shapes.
func TraceModelOf(f *gguf.File, shapes []moe.LayerShape) TraceModel {
	m := TraceModel{Layers: make([]TraceLayer, len(shapes))}
	m.Name, _ = f.String("general.name")
	m.Arch, _ = f.String("general.architecture")
	if k, err := f.Uint(m.Arch + ".expert_used_count"); err == nil && k <= 1<<16 {
		m.ExpertsUsed = int(k)
	}
	for l, s := range shapes {
		m.Layers[l] = TraceLayer{Experts: s.Experts}
		if s.Experts > 0 {
			m.Layers[l].ExpertBytes = s.Bytes()
		}
	}
	return m
}

// ExpertBytes returns the bytes of one expert of layer (0 when out of range).
func (m TraceModel) ExpertBytes(layer int) int64 {
	if layer < 0 || layer >= len(m.Layers) {
		return 0
	}
	return m.Layers[layer].ExpertBytes
}

// TotalExpertBytes returns the bytes of all experts.
func (m TraceModel) TotalExpertBytes() int64 {
	var n int64
	for _, l := range m.Layers {
		n += int64(l.Experts) * l.ExpertBytes
	}
	return n
}

// String describes the model in one line.
func (m TraceModel) String() string {
	experts := 0
	for _, l := range m.Layers {
		experts = max(experts, l.Experts)
	}
	name := cmp.Or(m.Name, "unnamed")
	return fmt.Sprintf("%s (%s, %d layers × %d experts, top-%d)", name, m.Arch, len(m.Layers), experts, m.ExpertsUsed)
}

// Match returns nil when a trace of m replays on other, or an error saying
// how they differ.
func (m TraceModel) Match(other TraceModel) error {
	differ := func(what string) error {
		return fmt.Errorf("expert: the trace was recorded from another model: %s, this model is %s (%s differ)", m, other, what)
	}
	if m.Arch != other.Arch {
		return differ("architectures")
	}
	if len(m.Layers) != len(other.Layers) {
		return differ("layer counts")
	}
	for l := range m.Layers {
		if m.Layers[l].Experts != other.Layers[l].Experts {
			return differ(fmt.Sprintf("layer %d's expert counts", l))
		}
		if m.Layers[l].ExpertBytes != other.Layers[l].ExpertBytes {
			return differ(fmt.Sprintf("layer %d's expert sizes", l))
		}
	}
	if m.ExpertsUsed != other.ExpertsUsed {
		return differ("experts per token")
	}
	return nil
}

// TraceFile is a recorded routing trace with the model it came from: the
// file `bench --ladder --record-trace` writes and `lesfarm replay` reads.
type TraceFile struct {
	Model TraceModel
	Trace RoutingTrace
}

// traceMagic starts every trace file (after gzip decompression).
const traceMagic = "LESTRACE"

const traceVersion = 1

// Limits that keep a corrupt or hostile trace from allocating without bound.
const (
	maxTraceLayers  = 4096
	maxTraceExperts = 1 << 16
	maxTraceCalls   = 1 << 26
	maxTraceBytes   = 1 << 30 // decompressed
	maxTraceName    = 1 << 10
)

// Write writes t gzip-compressed. The payload is the magic, a version, the
// model, the calls (layer and prefetch flag, the experts in call order)
// and a CRC-32 of everything before it, all integers as uvarints.
func (t *TraceFile) Write(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString(traceMagic)
	u := func(x uint64) { b.Write(binary.AppendUvarint(nil, x)) }
	str := func(s string) { u(uint64(len(s))); b.WriteString(s) }
	u(traceVersion)
	str(t.Model.Name)
	str(t.Model.Arch)
	u(uint64(t.Model.ExpertsUsed))
	u(uint64(len(t.Model.Layers)))
	for _, l := range t.Model.Layers {
		u(uint64(l.Experts))
		u(uint64(l.ExpertBytes))
	}
	u(uint64(len(t.Trace.Calls)))
	for _, c := range t.Trace.Calls {
		flag := uint64(0)
		if c.Prefetch {
			flag = 1
		}
		u(uint64(c.Layer)<<1 | flag)
		u(uint64(len(c.Experts)))
		for _, e := range c.Experts {
			u(uint64(e))
		}
	}
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], crc32.ChecksumIEEE(b.Bytes()))
	b.Write(sum[:])
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(b.Bytes()); err != nil {
		return err
	}
	return zw.Close()
}

// WriteFile writes t to path (through a temporary file, renamed when
// complete).
func (t *TraceFile) WriteFile(path string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("expert: trace: %w", err)
	}
	bw := bufio.NewWriter(f)
	err = t.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("expert: writing trace %s: %w", path, err)
	}
	return nil
}

// ErrBadTrace is wrapped by every error ReadTrace returns for a file that
// is not a complete, valid trace.
var ErrBadTrace = errors.New("expert: not a valid routing trace")

// ReadTrace reads a trace Write wrote. A truncated, corrupt or foreign
// file gives an error wrapping ErrBadTrace that says what is wrong.
func ReadTrace(r io.Reader) (*TraceFile, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: not gzip-compressed (%v)", ErrBadTrace, err)
	}
	payload, err := io.ReadAll(io.LimitReader(zr, maxTraceBytes+1))
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the file is truncated", ErrBadTrace)
		}
		return nil, fmt.Errorf("%w: %v", ErrBadTrace, err)
	}
	if len(payload) > maxTraceBytes {
		return nil, fmt.Errorf("%w: more than %d bytes decompressed", ErrBadTrace, maxTraceBytes)
	}
	return DecodeTrace(payload)
}

// ReadTraceFile reads the trace at path.
func ReadTraceFile(path string) (*TraceFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("expert: trace: %w", err)
	}
	defer f.Close()
	t, err := ReadTrace(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// DecodeTrace parses a decompressed trace payload.
func DecodeTrace(p []byte) (*TraceFile, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadTrace, fmt.Sprintf(format, args...))
	}
	if len(p) < len(traceMagic)+4 || string(p[:len(traceMagic)]) != traceMagic {
		return nil, bad("missing the %s header", traceMagic)
	}
	body, sum := p[:len(p)-4], binary.LittleEndian.Uint32(p[len(p)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, bad("checksum mismatch (corrupt or truncated)")
	}
	d := traceDecoder{b: body[len(traceMagic):]}
	if v := d.uint("version", 1<<20); d.err == nil && v != traceVersion {
		return nil, bad("version %d, this build reads version %d", v, traceVersion)
	}
	t := &TraceFile{}
	t.Model.Name = d.str("model name")
	t.Model.Arch = d.str("architecture")
	t.Model.ExpertsUsed = int(d.uint("experts per token", maxTraceExperts))
	nl := int(d.uint("layer count", maxTraceLayers))
	if d.err == nil {
		t.Model.Layers = make([]TraceLayer, nl)
	}
	for l := 0; l < nl && d.err == nil; l++ {
		t.Model.Layers[l].Experts = int(d.uint("expert count", maxTraceExperts))
		t.Model.Layers[l].ExpertBytes = int64(d.uint("expert bytes", 1<<40))
		if d.err == nil && (t.Model.Layers[l].Experts == 0) != (t.Model.Layers[l].ExpertBytes == 0) {
			d.fail("layer %d has %d experts of %d bytes", l, t.Model.Layers[l].Experts, t.Model.Layers[l].ExpertBytes)
		}
	}
	nc := int(d.uint("call count", maxTraceCalls))
	if d.err == nil {
		// Each call takes at least two bytes, so a short file cannot
		// make this allocation large.
		if nc > len(d.b)/2 {
			d.fail("%d calls in %d bytes (truncated)", nc, len(d.b))
		} else {
			t.Trace.Calls = make([]TraceCall, 0, nc)
		}
	}
	for c := 0; c < nc && d.err == nil; c++ {
		lf := d.uint("call layer", 2*maxTraceLayers)
		layer := int(lf >> 1)
		if d.err == nil && layer >= nl {
			d.fail("call %d names layer %d of %d", c, layer, nl)
			break
		}
		experts := 0
		if d.err == nil {
			experts = t.Model.Layers[layer].Experts
		}
		n := int(d.uint("experts in a call", uint64(experts)))
		if d.err == nil && n > len(d.b) {
			d.fail("call %d has %d experts in %d bytes (truncated)", c, n, len(d.b))
			break
		}
		call := TraceCall{Layer: layer, Prefetch: lf&1 == 1, Experts: make([]int, 0, n)}
		for i := 0; i < n && d.err == nil; i++ {
			e := int(d.uint("expert", uint64(experts)))
			if d.err == nil && e >= experts {
				d.fail("call %d names expert %d of layer %d's %d", c, e, layer, experts)
			}
			call.Experts = append(call.Experts, e)
		}
		if d.err == nil && !call.Prefetch {
			for i, e := range call.Experts {
				for _, x := range call.Experts[:i] {
					if e == x {
						d.fail("call %d demands layer %d expert %d twice", c, layer, e)
					}
				}
			}
		}
		t.Trace.Calls = append(t.Trace.Calls, call)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last call", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return t, nil
}

type traceDecoder struct {
	b   []byte
	err error
}

func (d *traceDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadTrace, fmt.Sprintf(format, args...))
	}
}

// uint reads a uvarint of at most limit (inclusive).
func (d *traceDecoder) uint(what string, limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or malformed %s", what)
		return 0
	}
	d.b = d.b[n:]
	if x > limit {
		d.fail("%s %d exceeds %d", what, x, limit)
		return 0
	}
	return x
}

func (d *traceDecoder) str(what string) string {
	n := int(d.uint(what+" length", maxTraceName))
	if d.err != nil {
		return ""
	}
	if n > len(d.b) {
		d.fail("truncated %s", what)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	if strings.ContainsRune(s, 0) {
		d.fail("%s contains a NUL byte", what)
	}
	return s
}
