package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
)

// PDConfig is a disaggregated fleet: a pool of prefill pods and a pool of
// decode pods, each pod an Engine placed on the topology, and the links
// the KV cache crosses between them.
type PDConfig struct {
	// Prefill and Decode configure the engines of each pool; their Servers
	// field is ignored (the pods below say how many).
	Prefill, Decode Config
	// PrefillPods and DecodePods place each pod. There may be no prefill
	// pods (every request then runs on a decode pod alone); there must be a
	// decode pod.
	PrefillPods, DecodePods []features.Topology
	Links                   Links
	// KVBytesPerToken is the size of one token's KV cache, which depends on
	// the model: layers × KV heads × head dim × 2 (K and V) × bytes per
	// element; 256 KiB for Qwen3-32B in bf16 (the default engine's model).
	KVBytesPerToken float64
	// PrefillFailureRate is the probability that a prefill pod's answer is
	// an error after it ran the prompt (a lost connection, a failed KV
	// export); the sidecar then sends the request to the decode pod alone.
	PrefillFailureRate float64
	// Seed drives the failures; a run is a pure function of its inputs and
	// the seed.
	Seed uint64
	// ClientTimeout, when positive, is how long a client waits for its
	// request to finish before it gives up (a benchmark client's time-out):
	// the request is then dropped wherever it is, as vLLM aborts a request
	// whose client disconnected, and counts as timed out.
	ClientTimeout time.Duration
	// ScrapeInterval, when positive, makes the router see pods' gauges (KV
	// use, waiting, running) as of the last scrape, refreshed at most this
	// often, as llm-d's metrics scraping does; 0 means always fresh. Prefix
	// scores, the router's own counts and transfers are always current.
	ScrapeInterval time.Duration
}

// DefaultKVBytesPerToken is Qwen3-32B's KV size in bf16: 64 layers × 8 KV
// heads × 128 dims × 2 (K, V) × 2 bytes.
const DefaultKVBytesPerToken = 64 * 8 * 128 * 2 * 2

// Validate reports the first setting a disaggregated fleet cannot run with.
func (c PDConfig) Validate() error {
	if len(c.DecodePods) == 0 {
		return fmt.Errorf("pd config: no decode pods, need at least 1")
	}
	for _, p := range []struct {
		name string
		cfg  Config
	}{{"prefill", c.Prefill}, {"decode", c.Decode}} {
		cfg := p.cfg
		cfg.Servers = 1
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("pd config: %s engines: %w", p.name, err)
		}
	}
	if err := c.Links.Validate(); err != nil {
		return fmt.Errorf("pd config: %w", err)
	}
	if !(c.KVBytesPerToken > 0) || math.IsInf(c.KVBytesPerToken, 0) {
		return fmt.Errorf("pd config: kv_bytes_per_token = %g, need a positive number", c.KVBytesPerToken)
	}
	if !(c.PrefillFailureRate >= 0 && c.PrefillFailureRate <= 1) {
		return fmt.Errorf("pd config: prefill_failure_rate = %g, need 0 to 1", c.PrefillFailureRate)
	}
	if c.ScrapeInterval < 0 || c.ClientTimeout < 0 {
		return fmt.Errorf("pd config: scrape interval %v and client timeout %v, need 0 or more", c.ScrapeInterval, c.ClientTimeout)
	}
	return nil
}

// PodState is one candidate pod as a P/D router sees it: its ServerState
// (Index is its index in its own pool) and its placement.
type PodState struct {
	ServerState
	Topology features.Topology
	// Transfers is the number of KV transfers into or out of the pod now
	// (after their link's setup latency or still in it): the contention a
	// sidecar can see on its own pod.
	Transfers int
}

// PDChoice is a P/D router's decision for one request: the decode pod, and
// the prefill pod or NoSplit.
type PDChoice struct {
	Prefill int // index into the prefill pool, or NoSplit
	Decode  int // index into the decode pool
}

// NoSplit, as PDChoice.Prefill, sends the request to the decode pod alone,
// which runs its prefill too.
const NoSplit = -1

// PDRouter picks, for each request, a decode pod and either a prefill pod
// or NoSplit. prefill may be empty. A router may keep state between calls
// (a fleet calls it from one goroutine).
type PDRouter interface {
	RoutePD(req *Request, prefill, decode []PodState) PDChoice
}

// PDOutcome is what happened to one request in a disaggregated fleet: the
// route it took and, for a split, its prefill run and KV transfer. These
// are the fields a routing sidecar can report, from which a transfer model
// can be learned.
type PDOutcome struct {
	Request *Request
	// Decode is the request on its decode pod. Its Dispatch is the client's
	// dispatch, so its TTFT, TPOT and E2E are what the client saw, across
	// the prefill, the transfer and the decode; Server is the decode pod.
	Decode *Outcome
	// Prefill is the prompt's run on the prefill pod (with max_tokens=1),
	// nil unless the router split the request. Its TTFT is the prefill time.
	Prefill *Outcome
	// Split says the router chose a prefill pod. PrefillFailed says that
	// pod answered with an error, after which the decode pod ran the
	// request alone (no transfer).
	Split, PrefillFailed bool
	PrefillPod           int // NoSplit unless Split
	DecodePod            int
	PrefillTopology      features.Topology
	DecodeTopology       features.Topology
	// KVTransferTokens is the prompt less what the decode pod had cached
	// when the transfer started; KVTransferBytes is that at the configured
	// bytes per token. Transfer is nil when no transfer took place.
	KVTransferTokens int
	KVTransferBytes  float64
	Transfer         *Transfer
}

// PrefillTime is the prefill pod's TTFT, zero without a prefill run.
func (o *PDOutcome) PrefillTime() time.Duration {
	if o.Prefill == nil || o.Prefill.FirstToken == 0 {
		return 0
	}
	return o.Prefill.TTFT()
}

// KVTransferTime is the measured transfer time (actual_kv_transfer_ms),
// zero without a completed transfer.
func (o *PDOutcome) KVTransferTime() time.Duration {
	if o.Transfer == nil || o.Transfer.End == 0 {
		return 0
	}
	return o.Transfer.End - o.Transfer.Start
}

// PDHooks are called as a disaggregated fleet runs, in simulated-time
// order. Any may be nil.
type PDHooks struct {
	// OnDispatch follows the router's choice, with the route recorded in o
	// (a request its decode pod can never hold is already Rejected);
	// prefill and decode are every candidate as the router saw them, valid
	// only during the call.
	OnDispatch func(o *PDOutcome, prefill, decode []PodState)
	// OnTransfer: a KV transfer finished; o.KVTransferTime() is known.
	OnTransfer func(o *PDOutcome)
	// OnFirstToken: the client got its first token (o.Decode.FirstToken).
	OnFirstToken func(o *PDOutcome)
	// OnFinish: the request finished on its decode pod, or was rejected or
	// timed out (o.Decode.Rejected, o.Decode.TimedOut).
	OnFinish func(o *PDOutcome)
}

// prefilled continues a split request whose prefill run has ended: the
// sidecar sends it to the decode pod, which (after its frontend) pulls the
// KV cache it does not already hold, or, after a failure, runs it alone.
func (f *PDFleet) prefilled(po *PDOutcome) error {
	delete(f.byPrefill, po.Prefill)
	i := po.DecodePod
	e := f.decode.engines[i]
	arrive := f.now + f.cfg.Decode.Steps().Frontend()
	if po.PrefillFailed {
		return f.decode.submit(i, po.Decode, e.PrefixCacheScore(po.Request), arrive)
	}
	r := po.Request
	cached := e.pool.matchLen(r.BlockHashes, r.promptBlocks()) * BlockSize
	po.KVTransferTokens = r.PromptTokens - cached
	po.KVTransferBytes = float64(po.KVTransferTokens) * f.cfg.KVBytesPerToken
	po.Transfer = f.net.start(arrive, po.PrefillTopology, po.DecodeTopology, po.KVTransferBytes, po)
	f.prefill.transfers[po.PrefillPod]++
	f.decode.transfers[po.DecodePod]++
	return nil
}

// transferred submits a request whose KV cache has arrived to its decode
// pod, where it starts with the whole prompt computed.
func (f *PDFleet) transferred(t *Transfer) error {
	po := t.owner
	f.prefill.transfers[po.PrefillPod]--
	f.decode.transfers[po.DecodePod]--
	if f.hooks.OnTransfer != nil {
		f.hooks.OnTransfer(po)
	}
	po.Decode.kvReady = po.Request.PromptTokens
	return f.decode.submit(po.DecodePod, po.Decode, 0, f.now)
}

// PDSummary is a disaggregated run in aggregate: the client's latencies
// (Summary, over the decode side), how often requests were split, and the
// KV transfers.
type PDSummary struct {
	Summary
	Split         int         `json:"split"`
	SplitRate     float64     `json:"split_rate"`
	PrefillFailed int         `json:"prefill_failed"`
	KVTransfer    Percentiles `json:"kv_transfer"`
	KVTransferMiB float64     `json:"kv_transfer_mib"` // total
	PrefillPods   int         `json:"prefill_pods"`
	DecodePods    int         `json:"decode_pods"`
}

// Summary summarises the run so far.
func (f *PDFleet) Summary() PDSummary {
	decode := make([]*Outcome, len(f.outcomes))
	var transfers []float64
	s := PDSummary{PrefillPods: len(f.prefill.engines), DecodePods: len(f.decode.engines)}
	for i, o := range f.outcomes {
		decode[i] = o.Decode
		if o.Split {
			s.Split++
		}
		if o.PrefillFailed {
			s.PrefillFailed++
		}
		if d := o.KVTransferTime(); o.Transfer != nil && o.Transfer.End != 0 {
			transfers = append(transfers, durationMs(d))
			s.KVTransferMiB += o.KVTransferBytes / (1 << 20)
		}
	}
	s.Summary = Summarize(decode)
	for _, p := range []*pool{&f.prefill, &f.decode} {
		for _, e := range p.engines {
			s.Evictions += e.Stats().Evictions
		}
	}
	if len(f.outcomes) > 0 {
		s.SplitRate = float64(s.Split) / float64(len(f.outcomes))
	}
	s.KVTransfer = percentiles(transfers)
	return s
}
