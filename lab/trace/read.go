// Package trace reads llm-d's training-data traces: JSONL files with one
// training entry per line, in the fields of the reference's TrainingEntry
// (kv_cache_percentage, input_token_length, actual_ttft_ms, ...). It is the
// one parser of these traces; eval replays what it reads, loadgen sends it
// and sim fits its cost model to it.
//
// Each line is decoded and validated by package wire, by the rules the
// service applies to the entries it is sent, so a trace an offline replay
// learns from is one the service would have stored. Reading is strict: a
// line that is not a valid entry fails the whole read with its line number,
// because a silently shortened or misread trace would make every figure
// computed from it wrong without saying so.
package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/wire"
)

// Epoch returns the timestamp Read gives the first row of a trace without
// timestamps; later rows follow one millisecond apart. Fixed, because the
// store's holdout choice hashes each sample's encoding, timestamp included,
// and a replay must be deterministic.
func Epoch() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// Read reads an llm-d JSONL trace (one training entry per line; blank lines
// are skipped; unknown fields are ignored) into samples in file order.
//
// A line must be an entry POST /add_training_data_bulk would accept (see
// wire.Decoder: the required fields, counts in [0, 10^8], fractions in
// [0, 1], finite latencies up to an hour, RFC 3339 timestamps). A row
// without a timestamp gets Epoch() plus one millisecond per row before it.
// A line that breaks a rule fails the whole read with its line number and
// the first field at fault, and so does a trace without entries.
func Read(r io.Reader) ([]features.Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var out []features.Sample
	line := 0
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		s, errs := wire.DecodeEntry(text)
		if len(errs) > 0 {
			return nil, fmt.Errorf("trace line %d: %s", line, wire.Describe(errs))
		}
		if s.Timestamp.IsZero() {
			s.Timestamp = Epoch().Add(time.Duration(len(out)) * time.Millisecond)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace line %d: %w", line+1, err)
	}
	if len(out) == 0 {
		return nil, errors.New("trace has no entries")
	}
	return out, nil
}

// ReadFile is Read on a file.
func ReadFile(path string) ([]features.Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	defer f.Close()
	s, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", path, err)
	}
	return s, nil
}
