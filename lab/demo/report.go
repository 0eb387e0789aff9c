package demo

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
)

// TTFTEntry is the training entry llm-d's router sends (streaming mode) at a
// request's first token: the chosen server's dispatch-time row, the TTFT in
// whole milliseconds (truncated, as the router measures it), actual_tpot_ms 0
// and num_tokens_generated 0 (docs/PROTOCOL.md §6).
func TTFTEntry(o *sim.Outcome, at time.Time) features.Sample {
	row := predictRow(o.Row)
	row.NumTokensGenerated = 0
	return features.Sample{
		Row:          row,
		ActualTTFTMs: math.Trunc(float64(o.TTFT()) / float64(time.Millisecond)),
		Timestamp:    at,
	}
}

// TPOTEntry is the entry the router sends at the end of the stream, when
// the answer had more than one token: (e2e − ttft)/(tokens − 1) in
// milliseconds, actual_ttft_ms 0, num_tokens_generated 0 and, as llm-d
// does, prefix_cache_score 0 (docs/PROTOCOL.md §6). ok is false for a one-token answer.
func TPOTEntry(o *sim.Outcome, at time.Time) (features.Sample, bool) {
	if o.Request.OutputTokens < 2 {
		return features.Sample{}, false
	}
	row := predictRow(o.Row)
	row.NumTokensGenerated = 0
	row.PrefixCacheScore = 0
	return features.Sample{
		Row:          row,
		ActualTPOTMs: float64(o.TPOT()) / float64(time.Millisecond),
		Timestamp:    at,
	}, true
}

// Reporter buffers training entries and posts them in bulk, as the router's
// client does once per flush interval.
type Reporter struct {
	client  *Client
	pending []features.Sample
	sent    int // entries the trainer accepted
	// upstream, when set, is a router that posts entries of its own
	// (llm-d's scheduler with Headroom's producer): every flush flushes it
	// first, so that a retrain has what it reported.
	upstream flusher
}

// NewReporter reports to c's trainer.
func NewReporter(c *Client) *Reporter { return &Reporter{client: c} }

// Add buffers one entry.
func (r *Reporter) Add(e features.Sample) { r.pending = append(r.pending, e) }

// Sent is the number of entries the trainer has accepted so far.
func (r *Reporter) Sent() int { return r.sent }

// Flush posts the buffered entries. Unlike llm-d's client, which drops a
// failed flush, it keeps them for the next attempt: in the demo a lost
// flush would only hide a bug.
func (r *Reporter) Flush(ctx context.Context) error {
	if r.upstream != nil {
		if err := r.upstream.flush(ctx); err != nil {
			return err
		}
	}
	if len(r.pending) == 0 {
		return nil
	}
	n, err := r.client.AddTrainingData(ctx, r.pending)
	if err != nil {
		return fmt.Errorf("report %d samples: %w", len(r.pending), err)
	}
	if n != len(r.pending) {
		return fmt.Errorf("report %d samples: trainer accepted %d", len(r.pending), n)
	}
	r.sent += n
	r.pending = r.pending[:0]
	return nil
}

// retrain posts the buffered entries, retrains svc at once (the demo's
// simulated clock runs faster than the trainer's ticker) and returns the
// model the predictor then serves.
func (r *Reporter) retrain(ctx context.Context, svc *Service) (ModelInfo, error) {
	if err := r.Flush(ctx); err != nil {
		return ModelInfo{}, err
	}
	if _, err := svc.Retrain(ctx); err != nil {
		return ModelInfo{}, err
	}
	return r.client.ModelInfo(ctx)
}

// fleet is a simulated fleet the demo steps through: the monolithic one or
// the P/D one.
type fleet interface {
	Step() (bool, error)
	Now() time.Duration
}

// drive steps f to its end on the router client's cadence: every flushEvery
// of simulated time the buffered entries are posted, and every retrainEvery
// report is called instead (it flushes, retrains and records progress); it is
// called once more, done, when the fleet has finished. Before each, setTime
// is given the fleet's time, which the service then reads as its own.
// report's errors are returned as they are; drive's own say which phase
// failed.
func (r *Reporter) drive(ctx context.Context, phase string, f fleet, flushEvery, retrainEvery time.Duration,
	setTime func(time.Duration), report func(done bool) error) error {
	nextFlush, nextRetrain := flushEvery, retrainEvery
	for steps := 0; ; steps++ {
		if steps%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("demo %s: %w", phase, err)
			}
		}
		more, err := f.Step()
		if err != nil {
			return fmt.Errorf("demo %s: %w", phase, err)
		}
		if !more {
			break
		}
		now := f.Now()
		if now >= nextRetrain {
			setTime(now)
			if err := report(false); err != nil {
				return err
			}
			nextRetrain = next(nextRetrain, now, retrainEvery)
			nextFlush = next(nextFlush, now, flushEvery)
		} else if now >= nextFlush {
			setTime(now)
			if err := r.Flush(ctx); err != nil {
				return fmt.Errorf("demo %s: %w", phase, err)
			}
			nextFlush = next(nextFlush, now, flushEvery)
		}
	}
	setTime(f.Now())
	return report(true)
}

// next is the first multiple of every after now, starting from due.
func next(due, now, every time.Duration) time.Duration {
	for due <= now {
		due += every
	}
	return due
}
