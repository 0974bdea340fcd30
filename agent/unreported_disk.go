package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/protocol"
)

// unreportedDisk keeps one file per finished, unsettled run in dir
// (CACHE_DIR/unreported), named RUN-TOKEN.json: the run, its fencing
// token, when to give up on it, and its result record. Each file is
// written to a temporary name, fsynced, renamed and the directory fsynced,
// so a crash (or SIGKILL) leaves a whole file or none. There are at most
// maxUnreported files; each holds one result message, which NATS bounds
// (protocol.MaxResultBytes). The zero value (no dir) keeps nothing.
//
// It is not safe for concurrent use: the agent calls it under a.mu, except
// save, which writes a file no other call touches.
type unreportedDisk struct {
	dir string
}

// unreportedFile is the on-disk form of an unreportedRun.
type unreportedFile struct {
	RunID   int64     `json:"run_id"`
	Token   int64     `json:"token"`
	Until   time.Time `json:"until"`
	Subject string    `json:"subject"`
	MsgID   string    `json:"msg_id"`
	Data    []byte    `json:"data"`
}

func (d unreportedDisk) name(runID, token int64) string {
	return filepath.Join(d.dir, strconv.FormatInt(runID, 10)+"-"+strconv.FormatInt(token, 10)+".json")
}

func (d unreportedDisk) save(u unreportedRun) error {
	if d.dir == "" {
		return nil
	}
	b, err := json.Marshal(unreportedFile{RunID: u.runID, Token: u.token, Until: u.until, Subject: u.rec.Subject, MsgID: u.rec.MsgID, Data: u.rec.Data})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), d.name(u.runID, u.token))
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	return syncDir(d.dir)
}

func (d unreportedDisk) remove(u unreportedRun) {
	if d.dir == "" {
		return
	}
	if err := os.Remove(d.name(u.runID, u.token)); err == nil {
		_ = syncDir(d.dir)
	}
}

// load returns the entries a previous process left, newest deadline last,
// at most maxUnreported of them. Expired, torn, foreign or malformed files
// are removed; the error reports only an unreadable directory.
func (d unreportedDisk) load(now time.Time) ([]unreportedRun, error) {
	if d.dir == "" {
		return nil, nil
	}
	des, err := os.ReadDir(d.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent: unreported runs: %w", err)
	}
	var out []unreportedRun
	for _, de := range des {
		path := filepath.Join(d.dir, de.Name())
		if !de.Type().IsRegular() || !strings.HasSuffix(de.Name(), ".json") {
			if strings.HasPrefix(de.Name(), ".tmp-") {
				os.Remove(path) // a write cut short
			}
			continue
		}
		u, ok := readUnreported(path)
		if !ok || now.After(u.until) || path != d.name(u.runID, u.token) {
			os.Remove(path)
			continue
		}
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].until.Before(out[j].until) })
	if n := len(out); n > maxUnreported {
		for _, u := range out[:n-maxUnreported] {
			os.Remove(d.name(u.runID, u.token))
		}
		out = out[n-maxUnreported:]
	}
	return out, nil
}

func readUnreported(path string) (unreportedRun, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 2*protocol.MaxResultBytes { // base64 of at most MaxResultBytes, and the fields
		return unreportedRun{}, false
	}
	var f unreportedFile
	if err := json.Unmarshal(b, &f); err != nil || f.RunID <= 0 || f.Token <= 0 || f.Subject == "" || len(f.Data) == 0 {
		return unreportedRun{}, false
	}
	return unreportedRun{runID: f.RunID, token: f.Token, until: f.Until,
		rec: telemetry.Record{Subject: f.Subject, MsgID: f.MsgID, Data: f.Data, Summary: true, Resend: true}}, true
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
