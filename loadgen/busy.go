package loadgen

import (
	"slices"
	"time"
)

// The servers' background work is known only to the second or so (the
// trainer reports when each fit started and how long it took; the
// predictor, when it put a bundle in service), and some of it lies outside
// what they time: the trainer writes the bundle after its fits, the
// predictor fetches and decodes it before it swaps. A busy span therefore
// runs from busyLead before the work to busyTail after it.
const (
	busyLead = 250 * time.Millisecond
	busyTail = 250 * time.Millisecond
)

// maxTimeline bounds the predictions kept with their release times, at 16
// bytes each: 64 MiB, about 14 minutes at 5,000 requests a second.
const maxTimeline = 1 << 22

// span is a stretch of wall time in which a server did background work.
type span struct{ from, to time.Time }

func busySpan(start time.Time, d time.Duration) span {
	return span{start.Add(-busyLead), start.Add(d + busyTail)}
}

// timed is one successful prediction: when the pacer released it (Unix
// nanoseconds) and how long it took.
type timed struct {
	released int64
	latency  time.Duration
}

// BusySummary compares the predictions released while a server did
// background work (a training run, or a bundle swap in the predictor) with
// the rest of the same run: same load, same ingestion, same machine, so
// their ratio is the background work's own effect on latency.
type BusySummary struct {
	TrainingRuns int     `json:"training_runs"`
	BundleSwaps  int     `json:"bundle_swaps"`
	Seconds      float64 `json:"seconds"` // busy time inside the measured window
	Requests     uint64  `json:"requests"`
	Latency              // of the requests released while busy
	Outside      Latency `json:"outside"`
	// P99Ratio is the busy p99 over the outside p99.
	P99Ratio float64 `json:"p99_ratio"`
	// Truncated says the run was too long to keep every prediction's time
	// (maxTimeline); the figures cover its beginning.
	Truncated bool `json:"truncated,omitempty"`
}

// splitBusy sorts the timeline's latencies into those released inside a
// span and the rest. It returns nil when there were no spans or no
// predictions.
func splitBusy(timeline []timed, training, swaps []span, from, to time.Time, truncated bool) *BusySummary {
	spans := mergeSpans(append(slices.Clone(training), swaps...))
	if len(spans) == 0 || len(timeline) == 0 {
		return nil
	}
	var in, out Histogram
	for _, t := range timeline {
		at := time.Unix(0, t.released)
		i, _ := slices.BinarySearchFunc(spans, at, func(s span, at time.Time) int { return s.to.Compare(at) })
		if i < len(spans) && !at.Before(spans[i].from) {
			in.Record(t.latency)
		} else {
			out.Record(t.latency)
		}
	}
	s := &BusySummary{TrainingRuns: len(training), BundleSwaps: len(swaps), Requests: in.Count(), Truncated: truncated}
	for _, sp := range spans {
		lo, hi := maxTime(sp.from, from), minTime(sp.to, to)
		if hi.After(lo) {
			s.Seconds += hi.Sub(lo).Seconds()
		}
	}
	if in.Count() > 0 {
		s.Latency = newLatency(&in)
	}
	if out.Count() > 0 {
		s.Outside = newLatency(&out)
	}
	if s.Outside.P99Ms > 0 {
		s.P99Ratio = s.P99Ms / s.Outside.P99Ms
	}
	return s
}

// mergeSpans sorts spans and joins those that overlap or touch.
func mergeSpans(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			out[n-1].to = maxTime(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
