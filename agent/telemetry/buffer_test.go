package telemetry

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func rec(i int, summary bool, size int) Record {
	return Record{Subject: fmt.Sprintf("lesfarm.v1.telemetry.%d", 1+i%2), MsgID: fmt.Sprintf("t/%d", i), Data: bytes.Repeat([]byte{byte(i)}, size), Summary: summary}
}

func drain(t *testing.T, b *Buffer) []Record {
	t.Helper()
	var out []Record
	for {
		r, id, err := b.Peek()
		if errors.Is(err, ErrEmpty) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
		b.Remove(id)
	}
}

func TestBufferFIFOAndReopen(t *testing.T) {
	dir := t.TempDir()
	b, err := OpenBuffer(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := b.Append(rec(i, i == 2, 100)); err != nil {
			t.Fatal(err)
		}
	}
	// A new process finds the same records in the same order.
	b2, err := OpenBuffer(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, b2)
	if len(got) != 5 {
		t.Fatalf("reopened buffer has %d records", len(got))
	}
	for i, r := range got {
		want := rec(i, i == 2, 100)
		if r.Subject != want.Subject || r.MsgID != want.MsgID || !bytes.Equal(r.Data, want.Data) || r.Summary != want.Summary {
			t.Fatalf("record %d = %+v", i, r)
		}
	}
	if b2.Len() != 0 || b2.Bytes() != 0 {
		t.Fatalf("len %d bytes %d after drain", b2.Len(), b2.Bytes())
	}
}

func TestBufferBoundDropsOldestDetailKeepsSummaries(t *testing.T) {
	b, err := OpenBuffer(t.TempDir(), 5_000)
	if err != nil {
		t.Fatal(err)
	}
	// Each record is ~1 KiB on disk: the bound holds 4.
	b.Append(rec(0, true, 1000)) // summary, oldest
	for i := 1; i <= 10; i++ {
		if err := b.Append(rec(i, false, 1000)); err != nil {
			t.Fatal(err)
		}
		if b.Bytes() > 5_000 {
			t.Fatalf("buffer at %d bytes, bound 5000", b.Bytes())
		}
	}
	total, by := b.Dropped()
	got := drain(t, b)
	if len(got) != 4 || !got[0].Summary || got[0].MsgID != "t/0" {
		t.Fatalf("kept %d records, first %+v", len(got), got[0].MsgID)
	}
	// The newest details survive, the oldest were dropped.
	for i, r := range got[1:] {
		if want := fmt.Sprintf("t/%d", 8+i); r.MsgID != want {
			t.Errorf("kept %s, want %s", r.MsgID, want)
		}
	}
	if total != 7 || by["lesfarm.v1.telemetry.1"]+by["lesfarm.v1.telemetry.2"] != 7 {
		t.Fatalf("dropped total %d by subject %v, want 7", total, by)
	}

	// Summaries are never dropped, even past the bound.
	for i := range 8 {
		b.Append(rec(100+i, true, 1000))
	}
	b.Append(rec(200, false, 1000)) // no room and no older detail: dropped itself
	got = drain(t, b)
	if len(got) != 8 {
		t.Fatalf("kept %d records, want the 8 summaries", len(got))
	}
	for _, r := range got {
		if !r.Summary {
			t.Fatalf("detail %s kept over summaries", r.MsgID)
		}
	}
	if total, _ := b.Dropped(); total != 8 {
		t.Fatalf("dropped %d, want 8", total)
	}
	// The counter survives a restart.
	b3, _ := OpenBuffer(b.dir, 5_000)
	if total, _ := b3.Dropped(); total != 8 {
		t.Fatalf("dropped after reopen %d, want 8", total)
	}
}

func TestBufferSkipsCorruptRecords(t *testing.T) {
	dir := t.TempDir()
	b, _ := OpenBuffer(dir, 1<<20)
	b.Append(rec(0, false, 50))
	b.Append(rec(1, false, 50))
	// Corrupt the first record and leave a torn temp file behind.
	files, _ := filepath.Glob(filepath.Join(dir, "*.d"))
	data, _ := os.ReadFile(files[0])
	data[10] ^= 0xff
	os.WriteFile(files[0], data, 0o644)
	os.WriteFile(filepath.Join(dir, "00000000000000000009.d.tmp"), []byte("torn"), 0o644)
	b2, _ := OpenBuffer(dir, 1<<20)
	got := drain(t, b2)
	if len(got) != 1 || got[0].MsgID != "t/1" {
		t.Fatalf("got %d records", len(got))
	}
	if total, _ := b2.Dropped(); total != 1 {
		t.Fatalf("dropped = %d, want 1 (the corrupt record)", total)
	}
	if _, err := os.Stat(filepath.Join(dir, "00000000000000000009.d.tmp")); !os.IsNotExist(err) {
		t.Fatal("torn temp file left behind")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encode(rec(1, false, 10)))
	f.Add([]byte{1, 2, 3})
	f.Add(append(make([]byte, 12), 0xff))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode(b, false)
		if err == nil {
			if !bytes.Equal(encode(r), b) {
				t.Fatalf("decode/encode round trip differs")
			}
		}
	})
}
