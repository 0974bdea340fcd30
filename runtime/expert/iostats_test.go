package expert

import (
	"testing"
	"time"
)

func TestIOClass(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want int
	}{{1, 0}, {4096, 0}, {4097, 1}, {8192, 1}, {884736, 8}, {1 << 20, 8}, {1<<20 + 1, 9}, {1 << 40, ioSizeClasses - 1}} {
		if got := ioClass(tc.n); got != tc.want {
			t.Errorf("ioClass(%d) = %d, want %d", tc.n, got, tc.want)
		}
		if c := ioClass(tc.n); c < ioSizeClasses-1 && IOClassBytes(c) < tc.n {
			t.Errorf("class %d bound %d below %d", c, IOClassBytes(c), tc.n)
		}
	}
}

// TestIOMeterDepth: a read served while another stays in flight has depth
// 2; the other, alone for part of its service, between 1 and 2.
func TestIOMeterDepth(t *testing.T) {
	var m ioMeter
	ta, aa := m.begin()
	tb, ab := m.begin()
	m.end(tb, ab, 8192)
	m.end(ta, aa, 1<<20)
	h := m.snapshot()
	b := h.Cells[ioClass(8192)][1]
	if b.Reads != 1 || b.Bytes != 8192 || b.DepthSum < 1.999 || b.DepthSum > 2.001 {
		t.Errorf("inner read: %+v, want one 8 KiB read at depth 2", b)
	}
	var a IOCell
	for _, c := range h.Cells[ioClass(1<<20)] {
		if c.Reads > 0 {
			a = c
		}
	}
	if a.Reads != 1 || a.DepthSum < 1 || a.DepthSum > 2 || a.Time <= 0 {
		t.Errorf("outer read: %+v, want one read of depth in [1, 2]", a)
	}
	if tot := h.Total(); tot.Reads != 2 || tot.Bytes != 8192+1<<20 {
		t.Errorf("total %+v", tot)
	}
	d := h.Sub(IOHist{})
	d.Add(h)
	if d.Total().Reads != 4 || h.Sub(h).Total().Reads != 0 {
		t.Error("Sub and Add do not count cell by cell")
	}
	m.reset()
	if m.snapshot().Total().Reads != 0 {
		t.Error("reset left reads")
	}
}

// TestReadTime: the table's time at a size and depth, interpolated in
// size and in throughput between depths, monotone where the grid is not.
func TestReadTime(t *testing.T) {
	st, err := NewServiceTimes([]int64{64 << 10, 1 << 20}, []int{1, 2, 4},
		[][]time.Duration{{100 * time.Microsecond, 150 * time.Microsecond, 400 * time.Microsecond}, {time.Millisecond, 1500 * time.Microsecond, 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n     int64
		depth float64
		want  time.Duration
	}{
		{1 << 20, 1, time.Millisecond},
		{1 << 20, 0.5, time.Millisecond},
		{1 << 20, 4, 2 * time.Millisecond},
		{1 << 20, 8, 4 * time.Millisecond},                // beyond QD 4: its throughput
		{2 << 20, 1, 2 * time.Millisecond},                // beyond the largest size: scaled
		{(64<<10 + 1<<20) / 2, 1, 550 * time.Microsecond}, // half way in size
		{64 << 10, 4, 300 * time.Microsecond},             // the 400 µs cell: QD 4 no slower in throughput than QD 2
		{1 << 20, 3, time.Duration(3 / (2/1.5e-3 + 0.5*(4/2e-3-2/1.5e-3)) * 1e9)},
	} {
		if got := st.ReadTime(tc.n, tc.depth); got < tc.want-time.Microsecond || got > tc.want+time.Microsecond {
			t.Errorf("ReadTime(%d, %g) = %v, want %v", tc.n, tc.depth, got, tc.want)
		}
	}
}
