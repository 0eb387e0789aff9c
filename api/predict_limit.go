package api

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"time"
	"unsafe"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/admission"
	"github.com/headroomhq/headroom/wire"
)

// Defaults of PredictorOptions' bounds on the prediction work in progress.
//
// A predictor's memory is what the prediction requests in progress hold:
// each body, its rows, their predictions and the answer, built whole and
// held until the client has read it. Without a bound, 40 clients posting
// 10,000-row requests and reading slowly took a predictor from 28 to
// 267 MB, past the 256 Mi its manifests allow (issue 26). So requests take
// a place, by an estimate of those bytes, before they predict: 32 MiB in
// all, a quarter of it kept for the small requests the router sends (below
// smallPrediction), so that large ones waiting for room never hold the hot
// path back. With the bodies still arriving (half as much again) the
// predictor stays under 128 MB whatever its clients do, with the Go memory
// limit it sets itself (cmd/headroom) collecting what the requests leave.
//
// And its CPU is what the large ones compute: 32 clients of 64 × 64
// /predict/pairs moved the hot path's p99 from 0.87 to 319 ms, their
// goroutines queued ahead of the router's on the two cores. Work over
// largeWork rows or pairs runs on at most MaxLargePredictions goroutines
// at once (default: every core but one), the rest waiting their turn
// without being scheduled, so the router's calls always find a core.
const (
	DefaultMaxConcurrentPredictions = 256
	DefaultMaxPredictBytes          = 32 << 20
	DefaultPredictWait              = 250 * time.Millisecond
	// DefaultPairsK is the pairs (and no-split options) /predict/pairs
	// returns when a request does not say: a router acts on the first.
	DefaultPairsK = 16
	// DefaultMaxPairs bounds the pairs one /predict/pairs request may
	// rank, prefill × decode candidates: 64 × 64.
	DefaultMaxPairs = wire.DefaultMaxPairCandidates * wire.DefaultMaxPairCandidates
	// DefaultMaxPredictPerClient bounds the prediction bodies one client
	// address may have arriving at once: above the router's 36 calls in
	// flight, since in a sidecar every call comes from one address.
	DefaultMaxPredictPerClient = 64
)

// smallPrediction is the estimated cost below which a request is the hot
// path's: about 200 rows, more than a router's call of 10 to 100
// candidates, and a 16 × 16 pair ranking.
const smallPrediction = 256 << 10

// largeWork is the rows, or pairs, above which a request's computation
// waits for a CPU slot: about a millisecond of work, where Predict starts
// to spread a batch over the cores (predictor.parallelRows).
const largeWork = 512

// Estimated bytes a request holds per row and per pair option: the
// decoded row and its prediction, and its encoded answer (half as much
// again while a large answer is encoded in parts); a pair option as
// ranked (pairs.Result) and encoded.
const (
	bytesPerRow        = int64(unsafe.Sizeof(features.Row{})+unsafe.Sizeof(wire.Prediction{})) + wire.BytesPerPrediction*3/2
	bytesPerRankedPair = 320
)

// predictLimiter bounds the prediction work in progress (see the
// defaults above). Invariant: a request predicts only holding a place in
// small or large for its estimated bytes, and, when its work is over
// largeWork, a slot of cpu; it gives both back once its answer is written
// (the place) or encoded (the slot).
type predictLimiter struct {
	small, large *admission.Queue
	cpu          chan struct{}
	wait         time.Duration
	// arrivals bounds the bodies arriving per client address, and the
	// bytes of large ones (metered as they arrive); smallArrivals the
	// bytes of small ones, charged at once: the router's bodies never wait
	// behind large ones arriving.
	arrivals      *clientLimiter
	smallArrivals *admission.Arrivals // only its bytes: Charge and Refund
	shed          *prometheus.CounterVec
}

func newPredictLimiter(opts *PredictorOptions, reg prometheus.Registerer) *predictLimiter {
	if opts.MaxConcurrentPredictions <= 0 {
		opts.MaxConcurrentPredictions = DefaultMaxConcurrentPredictions
	}
	if opts.MaxPredictBytes <= 0 {
		opts.MaxPredictBytes = DefaultMaxPredictBytes
	}
	if opts.MaxLargePredictions <= 0 {
		opts.MaxLargePredictions = max(1, runtime.GOMAXPROCS(0)-1)
	}
	if opts.PredictWait <= 0 {
		opts.PredictWait = DefaultPredictWait
	}
	n, b := opts.MaxConcurrentPredictions, opts.MaxPredictBytes
	l := &predictLimiter{
		small:         admission.NewQueue(n, max(b/4, 1), nil),
		large:         admission.NewQueue(n, max(b-b/4, 1), nil),
		cpu:           make(chan struct{}, opts.MaxLargePredictions),
		wait:          opts.PredictWait,
		arrivals:      newClientLimiter(DefaultMaxPredictPerClient, max(b/2, 1)),
		smallArrivals: admission.NewArrivals(1, max(b/8, smallPrediction)),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "headroom_predict_shed_total",
			Help: "Prediction requests answered 503 because the bounds on the work in progress stayed full for the whole wait, by bound: memory (--max-predict-bytes, --max-concurrent-predictions) or cpu (--max-large-predictions).",
		}, []string{"bound"}),
	}
	reg.MustRegister(l.shed)
	return l
}

// arrival is a prediction body read under the arriving bounds; done ends
// its count as arriving, once the request holds its place (admit) or has
// failed.
type arrival struct {
	l       *predictLimiter
	charged int64  // bytes charged at once, for a small body of known length
	unmeter func() // for a metered body
}

func (a arrival) done() {
	if a.unmeter != nil {
		a.unmeter()
	}
	if a.charged > 0 {
		a.l.smallArrivals.Refund(a.charged)
	}
}

// receive reads a prediction body under the arriving bounds (bodies per
// client address, bytes in all), answering the request itself when it
// cannot. A body of known length up to smallPrediction is charged its
// length at once (metering the router's small bodies would cost more than
// they hold); any other is metered as it arrives. The buffer goes back
// with putBody.
func (l *predictLimiter) receive(c *gin.Context, lim Limits) (buf *[]byte, a arrival, ok bool) {
	if !l.arrivals.enter(c) {
		return nil, arrival{}, false
	}
	a.l = l
	n := c.Request.ContentLength
	switch {
	case n >= 0 && n <= smallPrediction:
		if !l.smallArrivals.Charge(n) {
			l.arrivals.leave(c)
			writeBodyError(c, admission.ErrArrivingFull, lim.MaxBodyBytes)
			return nil, arrival{}, false
		}
		a.charged = n
	case n > 0 && l.arrivals.Arriving()+n > l.arrivals.MaxBytes():
		// It cannot arrive whole beside the bodies arriving now: refused
		// before its bytes are read, which would cost the CPU the router's
		// calls need, and then be thrown away.
		l.arrivals.leave(c)
		writeBodyError(c, admission.ErrArrivingFull, lim.MaxBodyBytes)
		return nil, arrival{}, false
	default:
		a.unmeter = l.arrivals.meter(c)
	}
	buf, err := readBodyBuffer(c, lim)
	l.arrivals.leave(c)
	if err != nil {
		putBody(buf)
		a.done()
		writeBodyError(c, err, lim.MaxBodyBytes)
		return nil, arrival{}, false
	}
	return buf, a, true
}

// ticket is a request's place under the bounds: bytes of one of the
// queues, and maybe a CPU slot. The zero ticket holds nothing. A ticket in
// use must not be copied: each copy would give back what it holds.
type ticket struct {
	q     *admission.Queue
	bytes int64
	cpu   chan struct{} // the slot's channel while held
}

// computed gives back the CPU slot, if held: once the answer is encoded.
func (t *ticket) computed() {
	if t.cpu != nil {
		<-t.cpu
		t.cpu = nil
	}
}

// release gives back the place, and the slot if still held: once the
// answer is written.
func (t *ticket) release() {
	t.computed()
	if t.q != nil {
		t.q.Release(t.bytes)
		t.q = nil
	}
}

// admit takes a place for a request estimated to hold cost bytes and to
// compute work rows or pairs, waiting up to the wait, or answers 503 and
// returns ok false. It does not allocate when room is free.
func (l *predictLimiter) admit(c *gin.Context, cost int64, work int) (t ticket, ok bool) {
	t.q = l.small
	if cost > smallPrediction {
		t.q = l.large
	}
	var ctx context.Context
	wait := func() context.Context { // only when there is something to wait for
		if ctx == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(c.Request.Context(), l.wait)
			context.AfterFunc(ctx, cancel)
		}
		return ctx
	}
	if t.bytes, ok = t.q.TryReserve(cost); !ok {
		if t.bytes, ok = t.q.Reserve(wait(), cost); !ok {
			max, maxBytes := t.q.Limits()
			l.refuse(c, "memory", fmt.Sprintf("prediction requests in progress hold what this one would need (at most %d requests and %d bytes; it needs about %d)", max, maxBytes, cost))
			return ticket{}, false
		}
	}
	if work <= largeWork {
		return t, true
	}
	select {
	case l.cpu <- struct{}{}:
	default:
		select {
		case l.cpu <- struct{}{}:
		case <-wait().Done():
			t.release()
			l.refuse(c, "cpu", fmt.Sprintf("%d large prediction requests are computing, the most at once (--max-large-predictions); this one has %d rows or pairs", cap(l.cpu), work))
			return ticket{}, false
		}
	}
	t.cpu = l.cpu
	return t, true
}

func (l *predictLimiter) refuse(c *gin.Context, bound, why string) {
	l.shed.WithLabelValues(bound).Inc()
	c.Header("Retry-After", "1")
	writeDetail(c, http.StatusServiceUnavailable, why+fmt.Sprintf(" for %s; retry later", l.wait))
}

// bulkCost is the estimated bytes a bulk request of rows rows, whose body
// was bodyLen bytes, holds.
func bulkCost(bodyLen, rows int) int64 { return int64(bodyLen) + int64(rows)*bytesPerRow }

// pairsCost is the estimated bytes a pair request, whose body was bodyLen
// bytes, holds: every pair ranked, and the answer, k options of each list
// or the matrix of every pair.
func pairsCost(bodyLen int, req *wire.PairsRequest) int64 {
	p, d := len(req.Prefill), len(req.Decode)
	out := int64(min(req.K, p*d)+min(req.K, d)+1) * wire.BytesPerPairOption
	if req.Matrix {
		out = wire.BytesPerPairOption + int64(p+2)*int64(d)*wire.BytesPerMatrixCell
	}
	return int64(bodyLen) + int64(p*d+d)*bytesPerRankedPair + out
}

// checkPairs applies the cost cap and the default k to a decoded pair
// request: 422 when it has more than maxPairs pairs.
func checkPairs(c *gin.Context, req *wire.PairsRequest, maxPairs, defaultK int) bool {
	if n := len(req.Prefill) * len(req.Decode); n > maxPairs {
		writeValidation(c, []wire.FieldError{{Type: "too_long", Loc: []any{"body", "prefill"},
			Msg: fmt.Sprintf("%d prefill × %d decode candidates are %d pairs, more than the %d one request may rank (--max-pairs)",
				len(req.Prefill), len(req.Decode), n, maxPairs),
			Ctx: map[string]any{"max_pairs": maxPairs}}})
		return false
	}
	if req.K <= 0 {
		req.K = defaultK
	}
	return true
}

// limitWrite gives a large answer of n bytes a write deadline that moves
// with Limits.MinBodyRate, as request bodies have: a client reading slower
// holds its place and its answer's bytes no longer than that.
func limitWrite(c *gin.Context, l Limits, n int) {
	if n <= smallPrediction || !(l.MinBodyRate > 0) {
		return
	}
	due := time.Now().Add(l.BodyGrace + time.Duration(float64(n)/l.MinBodyRate*float64(time.Second)))
	_ = http.NewResponseController(c.Writer).SetWriteDeadline(due) // not every writer can: then the server's timeout
}
