package routing

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Routed is imported routing: Experts[t][l] are the top-k expert ids of
// token t in MoE layer l, in the source's order.
type Routed struct {
	Experts [][][]int
	Layers  int
	TopK    int
}

// maxImport bounds what an imported file may make us allocate.
const maxImport = 1 << 28

var npyShape = regexp.MustCompile(`'shape':\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,?\s*\)`)

// ParseNPY reads vLLM's routed_experts array: a NumPy .npy file of int16
// with shape [tokens, MoE layers, top_k] in C order. Errors name the byte
// offset where the file goes wrong.
func ParseNPY(data []byte) (*Routed, error) {
	if len(data) < 10 || string(data[:6]) != "\x93NUMPY" {
		return nil, fmt.Errorf("byte 0: not a .npy file (no \\x93NUMPY magic)")
	}
	major := data[6]
	var hlen, off int
	switch major {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(data[8:10])), 10
	case 2, 3:
		if len(data) < 12 {
			return nil, fmt.Errorf("byte %d: truncated header length", len(data))
		}
		hlen, off = int(binary.LittleEndian.Uint32(data[8:12])), 12
	default:
		return nil, fmt.Errorf("byte 6: .npy version %d is not supported (1, 2 or 3)", major)
	}
	if hlen > len(data)-off {
		return nil, fmt.Errorf("byte %d: truncated header (%d of %d bytes)", len(data), len(data)-off, hlen)
	}
	h := string(data[off : off+hlen])
	if !strings.Contains(h, "'descr': '<i2'") && !strings.Contains(h, "'descr': '|i2'") {
		d := "unknown"
		if i := strings.Index(h, "'descr':"); i >= 0 {
			d = strings.TrimSpace(strings.SplitN(h[i+8:], ",", 2)[0])
		}
		return nil, fmt.Errorf("byte %d: dtype %s, want little-endian int16 ('<i2')", off, d)
	}
	if strings.Contains(h, "'fortran_order': True") {
		return nil, fmt.Errorf("byte %d: Fortran-order arrays are not supported", off)
	}
	m := npyShape.FindStringSubmatch(h)
	if m == nil {
		return nil, fmt.Errorf("byte %d: shape must have rank 3 [tokens, layers, top_k] (header %s)", off, strings.TrimSpace(h))
	}
	var dims [3]int
	for i := range dims {
		n, err := strconv.Atoi(m[i+1])
		if err != nil || n < 0 || n > maxImport {
			return nil, fmt.Errorf("byte %d: shape dimension %q out of range", off, m[i+1])
		}
		dims[i] = n
	}
	T, L, K := dims[0], dims[1], dims[2]
	if L < 1 || K < 1 {
		return nil, fmt.Errorf("byte %d: shape (%d, %d, %d) has no layers or no experts per token", off, T, L, K)
	}
	body := data[off+hlen:]
	if T > maxImport/(L*K) {
		return nil, fmt.Errorf("byte %d: shape (%d, %d, %d) is too large", off, T, L, K)
	}
	want := 2 * T * L * K
	if len(body) != want {
		return nil, fmt.Errorf("byte %d: %d data bytes, shape (%d, %d, %d) needs %d (truncated or padded)", off+hlen+len(body), len(body), T, L, K, want)
	}
	r := &Routed{Layers: L, TopK: K, Experts: make([][][]int, T)}
	p := 0
	for t := range T {
		r.Experts[t] = make([][]int, L)
		for l := range L {
			row := make([]int, K)
			for k := range K {
				v := int(int16(binary.LittleEndian.Uint16(body[p:])))
				if v < 0 {
					return nil, fmt.Errorf("byte %d: token %d layer %d: negative expert id %d", off+hlen+p, t, l, v)
				}
				row[k] = v
				p += 2
			}
			r.Experts[t][l] = row
		}
	}
	return r, nil
}

// megatronLine is one line of a Megatron router trace: the top-k expert
// ids of every token of one step in one MoE layer.
type megatronLine struct {
	Step       *int    `json:"step"`
	Layer      *int    `json:"layer"`
	TopIndices [][]int `json:"top_indices"`
}

// ParseMegatron reads a Megatron router-trace JSONL stream: one object per
// line with step, layer and top_indices (per token, its top-k expert
// ids). Every step must hold every layer once with the same tokens.
// Errors name the line.
func ParseMegatron(r io.Reader) (*Routed, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<26)
	type step struct {
		layers map[int][][]int
		line   int
	}
	var order []int
	steps := map[int]*step{}
	layers, topK := 0, 0
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var ml megatronLine
		if err := json.Unmarshal(b, &ml); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		if ml.Step == nil || ml.Layer == nil || ml.TopIndices == nil {
			return nil, fmt.Errorf("line %d: need step, layer and top_indices", line)
		}
		if *ml.Layer < 0 || *ml.Layer >= 4096 || *ml.Step < 0 {
			return nil, fmt.Errorf("line %d: step %d layer %d out of range", line, *ml.Step, *ml.Layer)
		}
		for t, row := range ml.TopIndices {
			if len(row) == 0 || (topK > 0 && len(row) != topK) {
				return nil, fmt.Errorf("line %d: token %d has %d experts, want %d", line, t, len(row), topK)
			}
			topK = len(row)
			for _, e := range row {
				if e < 0 || e >= 1<<16 {
					return nil, fmt.Errorf("line %d: token %d: expert id %d out of range", line, t, e)
				}
			}
		}
		s := steps[*ml.Step]
		if s == nil {
			s = &step{layers: map[int][][]int{}, line: line}
			steps[*ml.Step] = s
			order = append(order, *ml.Step)
		}
		if _, dup := s.layers[*ml.Layer]; dup {
			return nil, fmt.Errorf("line %d: step %d has layer %d twice", line, *ml.Step, *ml.Layer)
		}
		s.layers[*ml.Layer] = ml.TopIndices
		layers = max(layers, *ml.Layer+1)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %v", line+1, err)
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("line %d: no routing records", line)
	}
	out := &Routed{Layers: layers, TopK: topK}
	for _, id := range order {
		s := steps[id]
		n := -1
		for l := range layers {
			rows, ok := s.layers[l]
			if !ok {
				return nil, fmt.Errorf("line %d: step %d has no layer %d (of %d)", s.line, id, l, layers)
			}
			if n >= 0 && len(rows) != n {
				return nil, fmt.Errorf("line %d: step %d: layer %d has %d tokens, layer 0 %d", s.line, id, l, len(rows), n)
			}
			n = len(rows)
		}
		for t := range n {
			tok := make([][]int, layers)
			for l := range layers {
				tok[l] = s.layers[l][t]
			}
			out.Experts = append(out.Experts, tok)
			if len(out.Experts) > maxImport {
				return nil, fmt.Errorf("line %d: too many tokens", s.line)
			}
		}
	}
	return out, nil
}
