package pack

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// MergedName returns the name of layer's merged gate+up expert tensor,
// blk.L.ffn_gate_up_exps.weight (dims [cols, 2×rows, experts]; for each
// expert the gate rows come first, then the up rows), which llama.cpp
// accepts instead of separate gate and up tensors for qwen35moe and a few
// other architectures.
func MergedName(layer int) string { return fmt.Sprintf("blk.%d.ffn_gate_up_exps.weight", layer) }

// ExpertLayer is one layer's routed expert tensors in an unpacked (or
// compat-packed) GGUF: stacked gate, up and down, or the merged gate+up
// and down. Dims are [cols, rows, experts], expert-major.
type ExpertLayer struct {
	Layer, Experts int
	Hidden, FFN    int // gate/up have Hidden columns and FFN rows per expert
	// Gate, Up and Down are set for stacked tensors; GateUp and Down for a
	// merged gate+up.
	Gate, Up, Down, GateUp *gguf.TensorInfo
}

// Merged reports whether the layer stores gate and up in one tensor.
func (le *ExpertLayer) Merged() bool { return le.GateUp != nil }

// Part says where part i (0 gate, 1 up, 2 down) of expert e lies: its
// tensor, the byte offset of the part within that tensor, and its size.
func (le *ExpertLayer) Part(e, i int) (t *gguf.TensorInfo, off, size int64) {
	if le.Merged() && i < 2 {
		slice := le.GateUp.Size / int64(le.Experts)
		return le.GateUp, int64(e)*slice + int64(i)*slice/2, slice / 2
	}
	t = [3]*gguf.TensorInfo{le.Gate, le.Up, le.Down}[i]
	size = t.Size / int64(le.Experts)
	return t, int64(e) * size, size
}

// parseExpertName recognises blk.L.ffn_{gate,up,down}_exps.weight (part
// 0-2) and blk.L.ffn_gate_up_exps.weight (part 3).
func parseExpertName(name string) (layer, part int, ok bool) {
	if l, p, ok := parseStacked(name); ok {
		return l, p, true
	}
	rest, found := strings.CutPrefix(name, "blk.")
	if !found {
		return 0, 0, false
	}
	num, rest, found := strings.Cut(rest, ".")
	if !found || rest != "ffn_gate_up_exps.weight" {
		return 0, 0, false
	}
	l, err := strconv.Atoi(num)
	if err != nil || l < 0 || strconv.Itoa(l) != num {
		return 0, 0, false
	}
	return l, 3, true
}

// ExpertLayers finds and checks the routed expert tensors of f, in file
// order of their layers' first expert tensor. It returns the set of their
// names too. Errors are one line and name the tensor at fault: a layer
// with only some parts, both merged and separate gate/up, expert counts
// or widths that disagree between parts, or data that does not split into
// whole experts.
func ExpertLayers(f *gguf.File) ([]*ExpertLayer, map[string]bool, error) {
	names := map[string]bool{}
	var layers []*ExpertLayer
	byLayer := map[int]*ExpertLayer{}
	for _, t := range f.Tensors() {
		l, part, ok := parseExpertName(t.Name)
		if !ok {
			continue
		}
		if len(t.Dims) != 3 || t.Dims[0] == 0 || t.Dims[1] == 0 || t.Dims[2] == 0 || t.Dims[2] > 1<<16 || t.Dims[0] > 1<<24 || t.Dims[1] > 1<<24 {
			return nil, nil, fmt.Errorf("pack: tensor %s has dims %v, want [cols, rows, experts]", t.Name, t.Dims)
		}
		le := byLayer[l]
		if le == nil {
			le = &ExpertLayer{Layer: l, Experts: int(t.Dims[2])}
			byLayer[l] = le
			layers = append(layers, le)
		}
		if int(t.Dims[2]) != le.Experts {
			return nil, nil, fmt.Errorf("pack: layer %d: %s has %d experts, other parts %d", l, t.Name, t.Dims[2], le.Experts)
		}
		slot := [4]**gguf.TensorInfo{&le.Gate, &le.Up, &le.Down, &le.GateUp}[part]
		if *slot != nil {
			return nil, nil, fmt.Errorf("pack: tensor %s appears twice", t.Name)
		}
		*slot = t
		names[t.Name] = true
	}
	for _, le := range layers {
		if err := le.check(); err != nil {
			return nil, nil, err
		}
	}
	return layers, names, nil
}

// check validates a layer's parts against each other.
func (le *ExpertLayer) check() error {
	l := le.Layer
	switch {
	case le.GateUp != nil && (le.Gate != nil || le.Up != nil):
		return fmt.Errorf("pack: layer %d has both %s and separate gate/up expert tensors", l, MergedName(l))
	case le.Down == nil:
		return fmt.Errorf("pack: layer %d lacks %s", l, StackedName(l, 2))
	case le.GateUp == nil && le.Gate == nil:
		return fmt.Errorf("pack: layer %d lacks %s", l, StackedName(l, 0))
	case le.GateUp == nil && le.Up == nil:
		return fmt.Errorf("pack: layer %d lacks %s", l, StackedName(l, 1))
	}
	le.Hidden, le.FFN = int(le.Down.Dims[1]), int(le.Down.Dims[0])
	want := func(t *gguf.TensorInfo, cols, rows int) error {
		if t.Dims[0] != uint64(cols) || t.Dims[1] != uint64(rows) {
			return fmt.Errorf("pack: layer %d: %s has dims %v but %s has %v (want [%d, %d, %d])", l, t.Name, t.Dims, le.Down.Name, le.Down.Dims, cols, rows, le.Experts)
		}
		return nil
	}
	var err error
	if le.Merged() {
		if le.GateUp.Dims[1]%2 != 0 {
			return fmt.Errorf("pack: %s has an odd row count %d; gate and up must have the same width", le.GateUp.Name, le.GateUp.Dims[1])
		}
		err = want(le.GateUp, le.Hidden, 2*le.FFN)
	} else if err = want(le.Gate, le.Hidden, le.FFN); err == nil {
		err = want(le.Up, le.Hidden, le.FFN)
	}
	if err != nil {
		return err
	}
	for _, t := range []*gguf.TensorInfo{le.Gate, le.Up, le.Down, le.GateUp} {
		if t == nil {
			continue
		}
		rows := int64(t.Dims[1]) * int64(le.Experts)
		if t.Size%rows != 0 {
			return fmt.Errorf("pack: %s: %d bytes do not split into %d experts of whole rows", t.Name, t.Size, le.Experts)
		}
		if rs, err := t.Type.RowSize(int(t.Dims[0])); err != nil || int64(rs) != t.Size/rows {
			return fmt.Errorf("pack: %s: type %s does not fit rows of %d values", t.Name, t.Type, t.Dims[0])
		}
	}
	return nil
}
