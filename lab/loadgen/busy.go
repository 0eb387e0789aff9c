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
	Seconds  float64 `json:"seconds"` // busy time inside the measured window
	Requests uint64  `json:"requests"`
	Latency          // of the requests released while busy
	Outside  Latency `json:"outside"`
	// P99Ratio is the busy p99 over the outside p99.
	P99Ratio float64 `json:"p99_ratio"`
	// Training and Swaps are the two kinds of span apart.
	Training BusyPart `json:"training"`
	Swaps    BusyPart `json:"swaps"`
	// Truncated says the run was too long to keep every prediction's time
	// (maxTimeline); the figures cover its beginning.
	Truncated bool `json:"truncated,omitempty"`
}

// BusyPart is the latency inside one kind of busy span.
type BusyPart struct {
	Spans    int     `json:"spans"`
	Seconds  float64 `json:"seconds"`
	Requests uint64  `json:"requests"`
	Latency
}

// splitBusy sorts the timeline's latencies by the spans they were released
// in. It returns nil when there were no spans or no predictions.
func splitBusy(timeline []timed, training, swaps []span, from, to time.Time, truncated bool) *BusySummary {
	if len(training)+len(swaps) == 0 || len(timeline) == 0 {
		return nil
	}
	trainingSet, swapSet := mergeSpans(slices.Clone(training)), mergeSpans(slices.Clone(swaps))
	all := mergeSpans(append(slices.Clone(trainingSet), swapSet...))
	var busy, out, inTraining, inSwap Histogram
	for _, t := range timeline {
		at := time.Unix(0, t.released)
		a, b := covers(trainingSet, at), covers(swapSet, at)
		if a {
			inTraining.Record(t.latency)
		}
		if b {
			inSwap.Record(t.latency)
		}
		if a || b {
			busy.Record(t.latency)
		} else {
			out.Record(t.latency)
		}
	}
	s := &BusySummary{
		Seconds: seconds(all, from, to), Requests: busy.Count(), Latency: latencyOf(&busy), Outside: latencyOf(&out),
		Training:  BusyPart{len(training), seconds(trainingSet, from, to), inTraining.Count(), latencyOf(&inTraining)},
		Swaps:     BusyPart{len(swaps), seconds(swapSet, from, to), inSwap.Count(), latencyOf(&inSwap)},
		Truncated: truncated,
	}
	if s.Outside.P99Ms > 0 {
		s.P99Ratio = s.P99Ms / s.Outside.P99Ms
	}
	return s
}

// covers reports whether at lies in one of the sorted, disjoint spans (ends
// included).
func covers(spans []span, at time.Time) bool {
	i, _ := slices.BinarySearchFunc(spans, at, func(s span, at time.Time) int { return s.to.Compare(at) })
	return i < len(spans) && !at.Before(spans[i].from)
}

// seconds is the time the sorted, disjoint spans cover within [from, to].
func seconds(spans []span, from, to time.Time) float64 {
	var d time.Duration
	for _, sp := range spans {
		lo, hi := maxTime(sp.from, from), minTime(sp.to, to)
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d.Seconds()
}

// latencyOf is h's percentiles, zero when h is empty.
func latencyOf(h *Histogram) Latency {
	if h.Count() == 0 {
		return Latency{}
	}
	return newLatency(h)
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
