package embedded

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// smallTmpfs mounts a tmpfs of size (e.g. "8m") on a fresh directory and
// unmounts it at cleanup; the test is skipped, saying why, where mounting
// is not permitted (not root, no CAP_SYS_ADMIN).
func smallTmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot mount a %s tmpfs to fill (needs root): %v: %s", size, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes into dir until its file system is full and returns the
// filler's path.
func fill(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			return path
		}
	}
}

// TestRestartJetStreamAfterENOSPC: a stream whose store hit ENOSPC stays
// wedged after space comes back (publishes time out); RestartJetStream
// reopens it in process, and every message acknowledged before the full
// disk is still delivered to the durable consumer.
func TestRestartJetStreamAfterENOSPC(t *testing.T) {
	mnt := smallTmpfs(t, "8m")
	dir := filepath.Join(mnt, "nats")
	ns, err := StartNATS(NATSConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	const before = 10
	for range before {
		if _, err := js.Publish(ctx, "t.a", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	filler := fill(t, mnt)
	publish := func(n int) error {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "t.a", make([]byte, n))
		return err
	}
	// Publish until the store's writes fail (a publish is then never
	// acknowledged).
	var perr error
	for i := 0; i < 4096 && perr == nil; i++ {
		perr = publish(4096)
	}
	if perr == nil {
		t.Fatal("publishes kept succeeding on a full disk")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := publish(1); err == nil {
		t.Log("the stream took a publish after space came back without a restart (not wedged this time)")
	} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		t.Logf("publish after space came back: %v", err)
	}
	if err := RestartJetStream(ns, dir); err != nil {
		t.Fatal(err)
	}
	if err := publish(1); err != nil {
		t.Fatalf("publish after RestartJetStream: %v", err)
	}
	info, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	st, err := info.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The stream holds what was acknowledged: the messages from before,
	// those acknowledged while the disk filled, and the one after.
	stored := int(st.State.Msgs)
	if stored < before+1 {
		t.Fatalf("the stream holds %d messages after the restart, want at least %d", stored, before+1)
	}
	mb, err := cons.Fetch(stored+10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range mb.Messages() {
		n++
		_ = m.Ack()
	}
	if n != stored {
		t.Fatalf("fetched %d messages, want every one of the %d stored", n, stored)
	}
}
