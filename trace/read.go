// Package trace reads llm-d's training-data traces: JSONL files with one
// training entry per line, in the fields of the reference's TrainingEntry
// (kv_cache_percentage, input_token_length, actual_ttft_ms, ...). It is the
// one parser of these traces; eval replays what it reads, loadgen sends it
// and sim fits its cost model to it.
//
// Reading is strict: a line that is not a valid entry fails the whole read
// with its line number, because a silently shortened or misread trace would
// make every figure computed from it wrong without saying so.
package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/headroomhq/headroom/features"
)

// entry is one line of an llm-d training-data trace: the fields of the
// reference's TrainingEntry. Pointers tell an absent field from a zero.
type entry struct {
	KVCachePercentage     *float64 `json:"kv_cache_percentage"`
	InputTokenLength      *float64 `json:"input_token_length"`
	NumRequestWaiting     *float64 `json:"num_request_waiting"`
	NumRequestRunning     *float64 `json:"num_request_running"`
	NumTokensGenerated    *float64 `json:"num_tokens_generated"`
	PrefixCacheScore      *float64 `json:"prefix_cache_score"`
	PodType               *string  `json:"pod_type"`
	PrefillTokensInFlight *float64 `json:"prefill_tokens_in_flight"`
	DecodeTokensInFlight  *float64 `json:"decode_tokens_in_flight"`
	EncoderInputSize      *float64 `json:"encoder_input_size"`
	EncoderMatchedSize    *float64 `json:"encoder_matched_size"`
	ActualTTFTMs          *float64 `json:"actual_ttft_ms"`
	ActualTPOTMs          *float64 `json:"actual_tpot_ms"`
	PredictedTTFTMs       *float64 `json:"predicted_ttft_ms"`
	PredictedTPOTMs       *float64 `json:"predicted_tpot_ms"`
	Timestamp             *string  `json:"timestamp"`
}

// Epoch returns the timestamp Read gives the first row of a trace without
// timestamps; later rows follow one millisecond apart. Fixed, because the
// store's holdout choice hashes each sample's encoding, timestamp included,
// and a replay must be deterministic.
func Epoch() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// Read reads an llm-d JSONL trace (one training entry per line; blank lines
// are skipped; unknown fields are ignored) into samples in file order.
//
// Counts must be non-negative integers (at most 2^40), kv_cache_percentage
// and prefix_cache_score numbers in [0, 1], latencies non-negative and
// finite, and input_token_length present; timestamps, when given, are
// RFC 3339. A row without a timestamp gets Epoch() plus one millisecond per
// row before it. A line that breaks a rule fails the whole read with its
// line number, and so does a trace without entries.
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
		var e entry
		if err := json.Unmarshal(text, &e); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		s, err := e.sample(len(out))
		if err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
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

func (e *entry) sample(index int) (features.Sample, error) {
	var s features.Sample
	var err error
	count := func(name string, p *float64) int64 {
		if p == nil || err != nil {
			return 0
		}
		if v := *p; v < 0 || v != math.Trunc(v) || v > 1<<40 {
			err = fmt.Errorf("%s is %v, want a non-negative integer", name, v)
		}
		return int64(*p)
	}
	fraction := func(name string, p *float64) float64 {
		if p == nil || err != nil {
			return 0
		}
		if v := *p; !(v >= 0 && v <= 1) {
			err = fmt.Errorf("%s is %v, want a number in [0, 1]", name, v)
		}
		return *p
	}
	latency := func(name string, p *float64) float64 {
		if p == nil || err != nil {
			return 0
		}
		if v := *p; !(v >= 0) || math.IsInf(v, 0) {
			err = fmt.Errorf("%s is %v, want a non-negative number", name, v)
		}
		return *p
	}
	if e.InputTokenLength == nil {
		return s, errors.New("input_token_length is missing")
	}
	s.Row = features.Row{
		KVCachePercentage:     fraction("kv_cache_percentage", e.KVCachePercentage),
		InputTokenLength:      count("input_token_length", e.InputTokenLength),
		NumRequestWaiting:     count("num_request_waiting", e.NumRequestWaiting),
		NumRequestRunning:     count("num_request_running", e.NumRequestRunning),
		NumTokensGenerated:    count("num_tokens_generated", e.NumTokensGenerated),
		PrefixCacheScore:      fraction("prefix_cache_score", e.PrefixCacheScore),
		PrefillTokensInFlight: count("prefill_tokens_in_flight", e.PrefillTokensInFlight),
		DecodeTokensInFlight:  count("decode_tokens_in_flight", e.DecodeTokensInFlight),
		EncoderInputSize:      count("encoder_input_size", e.EncoderInputSize),
		EncoderMatchedSize:    count("encoder_matched_size", e.EncoderMatchedSize),
	}
	if e.PodType != nil {
		s.Row.PodType = *e.PodType
	}
	s.ActualTTFTMs = latency("actual_ttft_ms", e.ActualTTFTMs)
	s.ActualTPOTMs = latency("actual_tpot_ms", e.ActualTPOTMs)
	s.PredictedTTFTMs = latency("predicted_ttft_ms", e.PredictedTTFTMs)
	s.PredictedTPOTMs = latency("predicted_tpot_ms", e.PredictedTPOTMs)
	if err != nil {
		return s, err
	}
	s.Timestamp = Epoch().Add(time.Duration(index) * time.Millisecond)
	if e.Timestamp != nil && *e.Timestamp != "" {
		ts, perr := time.Parse(time.RFC3339Nano, *e.Timestamp)
		if perr != nil {
			return s, fmt.Errorf("timestamp %q: %w", *e.Timestamp, perr)
		}
		s.Timestamp = ts.UTC()
	}
	return s, nil
}
