package plugins

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requestcontrol"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
)

// What the EPP observes of a request becomes training entries the way
// llm-d's predicted-latency-producer builds them (docs/PROTOCOL.md §6):
// TTFT measured from dispatch (the end of the response in non-streaming
// mode), the TTFT entry on the row of the pod that ran the prompt (the
// prefill pod of a split request, pod_type prefill), the TPOT entry on the
// decode pod's row. A split request's TTFT entry adds what llm-d knows and
// Headroom learns the split's TTFT from (§5.1): both pods and their
// topology, the tokens whose KV moves, the transfers on the link; and the
// transfer's time when the deployment's sidecar reports it in a response
// header. Rows are the ones sent to the predictor for the request, so a
// sample's features are exactly its prediction's.

// PreRequest records the route the scheduler chose and when it was
// dispatched, and observes the plugins' time on the request's decision.
func (p *Producer) PreRequest(_ context.Context, request *fwksched.InferenceRequest, result *fwksched.SchedulingResult) error {
	start := time.Now()
	rc := p.context(request)
	if rc == nil || result == nil {
		return nil
	}
	defer func() {
		p.metrics.decision.Observe(float64(rc.spent.Load()+int64(time.Since(start))) / float64(time.Second))
	}()
	primary := result.ProfileResults[result.PrimaryProfileName]
	if primary == nil || len(primary.TargetEndpoints) == 0 {
		return nil
	}
	rc.decodePod = primary.TargetEndpoints[0].GetMetadata().ID.String()
	if pr := result.ProfileResults[p.params.PrefillProfile]; pr != nil && len(pr.TargetEndpoints) > 0 {
		rc.prefillPod = pr.TargetEndpoints[0].GetMetadata().ID.String()
		rc.concurrent = p.transfers.start(rc.prefillPod, rc.decodePod)
	}
	rc.predictedTTFT = rc.ranking.predictedTTFT(rc.prefillPod, rc.decodePod)
	rc.dispatched = p.clock.Now()
	return nil
}

// ResponseHeader reads the measured KV transfer, when the sidecar sends it.
func (p *Producer) ResponseHeader(_ context.Context, request *fwksched.InferenceRequest, response *requestcontrol.Response, _ *fwkdl.EndpointMetadata) {
	rc := p.context(request)
	if rc == nil || response == nil {
		return
	}
	if v, ok := response.Headers[p.params.TransferTimeHeader]; ok {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && !math.IsInf(ms, 0) {
			rc.transferMs = ms
		}
	}
}

// ResponseBody measures TTFT and TPOT as llm-d's producer does and buffers
// each entry when its label is known, as llm-d's producer records them: the
// TTFT entry at the first token (the end of the response in non-streaming
// mode), the TPOT entry at the end. A TTFT entry held until the end would
// reach the trainer a whole decode later, and in a burst the labels of the
// deeper queues, which widen the model's range, are the ones that matter.
func (p *Producer) ResponseBody(_ context.Context, request *fwksched.InferenceRequest, response *requestcontrol.Response, _ *fwkdl.EndpointMetadata) {
	rc := p.context(request)
	if rc == nil || response == nil || rc.dispatched.IsZero() {
		return
	}
	now := p.clock.Now()
	rc.chunks++
	if rc.ttft == 0 && (p.params.StreamingMode && !response.EndOfStream || !p.params.StreamingMode && response.EndOfStream) {
		rc.ttft = now.Sub(rc.dispatched)
		p.release(rc) // the first token means the KV cache has arrived
		if rc.ttft > 0 {
			p.training.add(p.ttftEntry(rc, now))
		}
	}
	if !response.EndOfStream {
		return
	}
	p.requests.Delete(requestID(request))
	p.release(rc)
	if rc.ttft <= 0 {
		return
	}
	if p.params.StreamingMode && rc.chunks > 1 {
		tpot := float64(now.Sub(rc.dispatched)-rc.ttft) / float64(time.Millisecond) / float64(rc.chunks-1)
		if e, ok := p.tpotEntry(rc, tpot, now); ok {
			p.training.add(e)
		}
	}
}

// context is request's context, nil when Produce kept none (no request ID,
// or no candidates).
func (p *Producer) context(request *fwksched.InferenceRequest) *requestContext {
	if request == nil {
		return nil
	}
	v, ok := p.requests.Load(requestID(request))
	if !ok {
		return nil
	}
	return v.(*requestContext)
}

// release ends a split request's transfer, once.
func (p *Producer) release(rc *requestContext) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.released || rc.prefillPod == "" {
		return
	}
	rc.released = true
	p.transfers.done(rc.prefillPod, rc.decodePod)
}

// ttftEntry is the request's TTFT entry (labels in whole milliseconds, as
// llm-d truncates them).
func (p *Producer) ttftEntry(rc *requestContext, at time.Time) trainingEntry {
	pod := rc.decodePod
	if rc.prefillPod != "" {
		pod = rc.prefillPod
	}
	c, _ := rc.row(pod)
	e := rowEntry(c, rc.input, at)
	e.ActualTTFTMs = math.Trunc(float64(rc.ttft) / float64(time.Millisecond))
	e.PredictedTTFTMs = rc.predictedTTFT
	if rc.prefillPod == "" {
		return e
	}
	if e.PodType == "" {
		e.PodType = "prefill"
	}
	d, _ := rc.row(rc.decodePod)
	p0, _ := rc.row(rc.prefillPod)
	e.PrefillPod, e.DecodePod = rc.prefillPod, rc.decodePod
	pt, dt := p0.Topology, d.Topology
	e.PrefillTopology, e.DecodeTopology = &pt, &dt
	dr, _ := rc.decodeRow(rc.decodePod)
	e.KVTransferTokens = rc.input - int64(math.Round(float64(rc.input)*dr.PrefixCacheScore))
	e.KVBytesPerToken = p.params.KVBytesPerToken
	e.ConcurrentTransfers = rc.concurrent
	if rc.transferMs > 0 && rc.transferMs < e.ActualTTFTMs {
		e.ActualKVTransferMs = rc.transferMs
		// The label is then the TTFT less the transfer, which the pair's
		// TTFT is not (§5.1).
		e.PredictedTTFTMs = 0
	}
	return e
}

// tpotEntry is the TPOT entry on the decode pod's row.
func (p *Producer) tpotEntry(rc *requestContext, tpotMs float64, at time.Time) (trainingEntry, bool) {
	c, ok := rc.row(rc.decodePod)
	if !ok || !(tpotMs > 0) {
		return trainingEntry{}, false
	}
	e := rowEntry(c, rc.input, at)
	e.ActualTPOTMs = tpotMs
	e.PrefixCacheScore = 0 // as llm-d's TPOT entries
	if e.PodType == "" {
		e.PodType = "decode"
	}
	return e, true
}

func rowEntry(c pairCandidate, input int64, at time.Time) trainingEntry {
	return trainingEntry{
		KVCachePercentage: c.KVCachePercentage, InputTokenLength: input, NumRequestWaiting: c.NumRequestWaiting,
		NumRequestRunning: c.NumRequestRunning, PrefixCacheScore: c.PrefixCacheScore, PodType: c.PodType,
		PrefillTokensInFlight: c.PrefillTokensInFlight, Timestamp: at.UTC(),
	}
}

// transferCounts counts KV transfers per pod: a split request's from its
// dispatch to its first token.
type transferCounts struct {
	mu     sync.Mutex
	perPod map[string]int64
}

func (t *transferCounts) count(pod string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.perPod[pod]
}

// start counts a transfer between the two pods and returns the transfers
// on the busier pod's link, this one included.
func (t *transferCounts) start(prefill, decode string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.perPod == nil {
		t.perPod = map[string]int64{}
	}
	t.perPod[prefill]++
	t.perPod[decode]++
	return max(t.perPod[prefill], t.perPod[decode])
}

func (t *transferCounts) done(prefill, decode string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, pod := range []string{prefill, decode} {
		if t.perPod[pod]--; t.perPod[pod] <= 0 {
			delete(t.perPod, pod)
		}
	}
}

// trainingBuffer holds entries until they are posted, in batches of at
// most maxBatch; a failed post is dropped, as llm-d's client drops it (the
// router never resends), and counted.
type trainingBuffer struct {
	client      *client
	metrics     *metrics
	interval    time.Duration
	maxBatch    int
	maxBuffered int

	mu      sync.Mutex
	pending []trainingEntry
	// posting serialises flushes, so that batches reach the trainer in
	// the order they were built.
	posting sync.Mutex
}

func newTrainingBuffer(c *client, m *metrics, interval time.Duration, maxBatch, maxBuffered int) *trainingBuffer {
	return &trainingBuffer{client: c, metrics: m, interval: interval, maxBatch: maxBatch, maxBuffered: maxBuffered}
}

func (b *trainingBuffer) add(e trainingEntry) {
	if b.client.trainer == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) >= b.maxBuffered {
		b.metrics.entries.WithLabelValues("dropped_full").Inc()
		return
	}
	b.pending = append(b.pending, e)
}

// start posts the buffer every interval until ctx ends, then once more.
func (b *trainingBuffer) start(ctx context.Context) {
	go func() {
		t := time.NewTicker(b.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				final, cancel := context.WithTimeout(context.Background(), postTimeout)
				_ = b.flush(final)
				cancel()
				return
			case <-t.C:
				_ = b.flush(ctx)
			}
		}
	}()
}

// flush posts every buffered entry; it returns the first failure, the
// failed batches being dropped.
func (b *trainingBuffer) flush(ctx context.Context) error {
	b.posting.Lock()
	defer b.posting.Unlock()
	b.mu.Lock()
	entries := b.pending
	b.pending = nil
	b.mu.Unlock()
	var errs []error
	for len(entries) > 0 {
		n := min(len(entries), b.maxBatch)
		postCtx, cancel := context.WithTimeout(ctx, postTimeout)
		err := b.client.addTrainingData(postCtx, entries[:n])
		cancel()
		if err != nil {
			b.metrics.entries.WithLabelValues("dropped_unavailable").Add(float64(n))
			errs = append(errs, err)
		} else {
			b.metrics.entries.WithLabelValues("posted").Add(float64(n))
		}
		entries = entries[n:]
	}
	return errors.Join(errs...)
}
