package expert

import (
	"testing"
	"time"
)

const us = time.Microsecond

// testTable is a device measured at 4 KiB, 64 KiB and 1 MiB × QD 1, 4, 16:
// best throughputs 16×4096 B / 200 µs, 16×64 KiB / 1 ms and 16 MiB / 9 ms,
// so transfers of 12.5 µs, 62.5 µs and 562.5 µs.
func testTable(t testing.TB) *ServiceTimes {
	t.Helper()
	st, err := NewServiceTimes([]int64{4 << 10, 64 << 10, 1 << 20}, []int{1, 4, 16}, [][]time.Duration{
		{100 * us, 110 * us, 200 * us},
		{200 * us, 300 * us, 1000 * us},
		{1000 * us, 2500 * us, 9000 * us},
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestServiceTimesReadCost: a measured table prices a read at its size's
// QD-1 time (latency + transfer), interpolated between sizes and scaled
// beyond them, with the transfer at the size's best measured throughput.
func TestServiceTimesReadCost(t *testing.T) {
	st := testTable(t)
	tests := []struct {
		n         int64
		qd1, xfer time.Duration
		what      string
	}{
		{4 << 10, 100 * us, 12500 * time.Nanosecond, "measured 4 KiB"},
		{64 << 10, 200 * us, 62500 * time.Nanosecond, "measured 64 KiB"},
		{1 << 20, 1000 * us, 562500 * time.Nanosecond, "measured 1 MiB"},
		{(4<<10 + 64<<10) / 2, 150 * us, 37500 * time.Nanosecond, "half way 4-64 KiB"},
		{1 << 10, 100 * us, 3125 * time.Nanosecond, "below the table: 4 KiB's time, transfer by bytes"},
		{2 << 20, 2000 * us, 1125 * us, "above the table: 1 MiB's rates"},
	}
	for _, tc := range tests {
		lat, x := st.ReadCost(tc.n)
		if lat+x != tc.qd1 || x != tc.xfer {
			t.Errorf("%s (%d B): latency %v + transfer %v, want QD-1 time %v with transfer %v", tc.what, tc.n, lat, x, tc.qd1, tc.xfer)
		}
	}
	// A loaded device's noisy grid (a stalled 4 KiB cell slower than
	// 64 KiB) is made monotone by lowering the outlier: a smaller read
	// never costs more.
	noisy, err := NewServiceTimes([]int64{4 << 10, 64 << 10}, []int{1}, [][]time.Duration{{300 * us}, {200 * us}})
	if err != nil {
		t.Fatal(err)
	}
	if l, x := noisy.ReadCost(4 << 10); l+x != 200*us {
		t.Errorf("noisy grid: 4 KiB costs %v, want 64 KiB's 200µs", l+x)
	}
	if l, x := noisy.ReadCost(64 << 10); l+x != 200*us {
		t.Errorf("noisy grid: 64 KiB costs %v, want its 200µs", l+x)
	}
}

// TestDeviceClockUsesServiceTimes: on the device clock a profile's table
// changes what reads cost as it says, where the simple form charges one
// latency and bandwidth: a synchronous 4 KiB fault takes the measured QD-1
// 100 µs (not 20 µs + 2 ns), a 64 KiB one 200 µs, and 16 demanded 1 MiB
// reads issued together finish at the table's time for their depth.
func TestDeviceClockUsesServiceTimes(t *testing.T) {
	simple := &Profile{Latency: 20 * us, Bandwidth: 2e9}
	table := &Profile{Latency: 20 * us, Bandwidth: 2e9, Service: testTable(t)}
	sync := func(p *Profile, n int64) time.Duration {
		d := &DeviceClock{prof: p, batchN: 1, comp: &Compute{}}
		if p.Service != nil {
			d.ps = &psFlash{st: p.Service}
		}
		d.syncRead(n, 0)
		return d.now
	}
	if got, want := sync(simple, 4<<10), 20*us+secs(4096/2e9); got != want {
		t.Errorf("simple 4 KiB fault: %v, want %v", got, want)
	}
	for n, want := range map[int64]time.Duration{4 << 10: 100 * us, 64 << 10: 200 * us, 128 << 10: 200*us + (800*us)*(64<<10)/(960<<10)} {
		if got := sync(table, n); got != want {
			t.Errorf("table %d B fault: %v, want %v", n, got, want)
		}
	}
	// 16 reads issued together share the device at the table's
	// throughput for QD 16: each takes its QD-16 time (deviceflash.go).
	d := &DeviceClock{prof: table, batchN: 1, ps: &psFlash{st: table.Service}}
	var es []*entry
	for range 16 {
		e := &entry{}
		d.issue(e, 1<<20, 1, true)
		es = append(es, e)
	}
	want := table.Service.ReadTime(1<<20, 16)
	for i, e := range es {
		if e.devDone < want-us || e.devDone > want+us {
			t.Errorf("read %d of 16 concurrent 1 MiB reads done at %v, want %v", i, e.devDone, want)
		}
	}
}

func BenchmarkServiceTimesReadCost(b *testing.B) {
	st := testTable(b)
	b.ReportAllocs()
	n := int64(0)
	for b.Loop() {
		n = (n + 7919) % (2 << 20)
		st.ReadCost(n)
	}
}
