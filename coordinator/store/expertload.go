package store

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// expertEntryBytes is the size of one packed expert_load entry.
const expertEntryBytes = 10

// PackExpertCounts appends the expert_load.counts encoding of r to buf:
// per expert, uint16 id, uint32 demand, uint32 miss, little-endian.
func PackExpertCounts(buf []byte, r *protocol.ExpertLoad) []byte {
	for i, id := range r.Experts {
		buf = binary.LittleEndian.AppendUint16(buf, uint16(id))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(r.Demand[i]))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(r.Miss[i]))
	}
	return buf
}

// UnpackExpertCounts calls fn for each entry of an expert_load.counts
// value; it reports an error for a value of the wrong length.
func UnpackExpertCounts(b []byte, fn func(expert int, demand, miss int64)) error {
	if len(b)%expertEntryBytes != 0 {
		return errors.New("store: expert_load.counts has a partial entry")
	}
	for ; len(b) > 0; b = b[expertEntryBytes:] {
		fn(int(binary.LittleEndian.Uint16(b)), int64(binary.LittleEndian.Uint32(b[2:])), int64(binary.LittleEndian.Uint32(b[6:])))
	}
	return nil
}

// insertExpertLoad stores the expert counts of accepted batches, in the
// telemetry transaction, as one statement (unnest of arrays); a redelivered
// batch's rows are skipped (ON CONFLICT DO NOTHING). It returns the number
// of new rows.
func insertExpertLoad(ctx context.Context, tx pgx.Tx, batches []*protocol.TelemetryBatch) (int64, error) {
	n := 0
	for _, b := range batches {
		n += len(b.Experts)
	}
	if n == 0 {
		return 0, nil
	}
	runs, seqs, steps := make([]int64, 0, n), make([]int32, 0, n), make([]int32, 0, n)
	cfgs, layers := make([]int16, 0, n), make([]int16, 0, n)
	counts := make([][]byte, 0, n)
	for _, b := range batches {
		for i := range b.Experts {
			r := &b.Experts[i]
			runs, seqs, steps = append(runs, b.RunID), append(seqs, int32(b.Seq)), append(steps, int32(r.Steps))
			cfgs, layers = append(cfgs, int16(r.ConfigIndex)), append(layers, int16(r.Layer))
			counts = append(counts, PackExpertCounts(make([]byte, 0, expertEntryBytes*len(r.Experts)), r))
		}
	}
	tag, err := tx.Exec(ctx, `INSERT INTO expert_load (run_id, config_index, layer, seq, steps, counts)
		SELECT * FROM unnest($1::bigint[], $2::smallint[], $3::smallint[], $4::integer[], $5::integer[], $6::bytea[])
		ON CONFLICT DO NOTHING`, runs, cfgs, layers, seqs, steps, counts)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// ExpertLayer is one layer's per-expert totals over a run config's
// measured decode steps: Demand[e] and Miss[e] for expert e (hits are
// Demand − Miss), dense up to the highest expert demanded.
type ExpertLayer struct {
	Layer        int
	Steps        int64
	Demand, Miss []int64
}

// ExpertLoad sums the stored per-expert counts of one config of a run, by
// layer (layers with no counts are absent), in layer order.
func (s *Store) ExpertLoad(ctx context.Context, runID int64, config int) ([]ExpertLayer, error) {
	rows, err := s.pool.Query(ctx, `SELECT layer, steps, counts FROM expert_load WHERE run_id = $1 AND config_index = $2
		ORDER BY layer, seq`, runID, config)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ExpertLayer
	for rows.Next() {
		var layer int16
		var steps int32
		var b []byte
		if err := rows.Scan(&layer, &steps, &b); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].Layer != int(layer) {
			out = append(out, ExpertLayer{Layer: int(layer)})
		}
		l := &out[len(out)-1]
		l.Steps += int64(steps)
		if err := UnpackExpertCounts(b, func(e int, d, m int64) {
			for len(l.Demand) <= e {
				l.Demand, l.Miss = append(l.Demand, 0), append(l.Miss, 0)
			}
			l.Demand[e] += d
			l.Miss[e] += m
		}); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// CountExpertLoadRows returns the number of expert_load rows of a run.
func (s *Store) CountExpertLoadRows(ctx context.Context, runID int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM expert_load WHERE run_id = $1`, runID).Scan(&n)
	return n, err
}
