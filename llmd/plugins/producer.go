package plugins

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requestcontrol"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	attrconcurrency "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/concurrency"
	attrprefix "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	attrtopology "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/topology"
	tokenproducer "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/filter/bylabel"
	"github.com/llm-d/llm-d-router/pkg/epp/metadata"

	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
)

// ProducerType is the plugin type of the producer.
const ProducerType = "headroom-pairs-producer"

// ProducerParameters configure the producer. Durations are Go duration
// strings ("50ms"); zero values take the defaults below.
type ProducerParameters struct {
	// PredictorURL lists Headroom predictors, comma-separated, tried in
	// turn; default the EPP's PREDICTION_SERVER_URL, as llm-d's
	// predicted-latency-producer reads it. Not used with RankInProcess.
	PredictorURL string `json:"predictorURL,omitempty"`
	// TrainerURL is Headroom's trainer; default TRAINING_SERVER_URL. Empty
	// with no such variable: no training entries are posted.
	TrainerURL string `json:"trainerURL,omitempty"`
	// RankInProcess ranks pairs in the EPP's own process, on the bundles
	// it follows from the trainer as a predictor does (long poll, signature
	// checked), instead of asking a predictor: no predictor is needed, and
	// a decision spends no loopback hop. Requires a trainer.
	RankInProcess bool `json:"rankInProcess,omitempty"`
	// SigningKeyFile holds the key the trainer signs bundles with (its
	// --signing-key-file); with it, the in-process ranker refuses bundles
	// not signed with it. Default HEADROOM_SIGNING_KEY_FILE, as Headroom
	// reads it; none: bundles are not checked.
	SigningKeyFile string `json:"signingKeyFile,omitempty"`
	// SyncInterval is how often the in-process ranker polls the trainer
	// besides its long poll (default MODEL_SYNC_INTERVAL_SEC, as Headroom's
	// predictor reads it, else the predictor's default).
	SyncInterval string `json:"syncInterval,omitempty"`
	// Objective ("mean" or "quantile") and Quantile are the statistic the
	// in-process ranker predicts, as a predictor's --objective and
	// --quantile (default LATENCY_OBJECTIVE_TYPE and
	// LATENCY_QUANTILE_ALPHA, else the predictor's defaults).
	Objective string  `json:"objective,omitempty"`
	Quantile  float64 `json:"quantile,omitempty"`
	// Timeout bounds the ranking (default 50ms): the /predict/pairs call,
	// or in process the wait to begin it; later, the request is scheduled
	// by the stock scorers (reason "deadline").
	Timeout string `json:"timeout,omitempty"`
	// KVBytesPerToken is the model's KV-cache size per token; 0: the
	// trainer's --kv-bytes-per-token.
	KVBytesPerToken float64 `json:"kvBytesPerToken,omitempty"`
	// NonCachedTokens is the disagg profile handler's
	// prefix-based-pd-decider threshold (its nonCachedTokens): through a
	// decode pod with fewer uncached prompt tokens the decider will not
	// split, so that pod competes alone, else with its pairs. 0, as for
	// the decider, means it never splits.
	NonCachedTokens int `json:"nonCachedTokens,omitempty"`
	// DecideSplit lets every decode pod compete alone too, so that the
	// best option, pair or pod alone, wins; with headroom-split-filter in
	// the prefill profile the request is then not split when the pod alone
	// is better.
	DecideSplit bool `json:"decideSplit,omitempty"`
	// TrustExtrapolation scores requests on extrapolated options too. By
	// default a request falls back when an extrapolated option could be
	// the better route (it ranks at or above every trusted option, or
	// every option is extrapolated), and is scored past the extrapolated
	// options otherwise (docs/PROTOCOL.md §4.7).
	TrustExtrapolation bool `json:"trustExtrapolation,omitempty"`
	// EndpointRoleLabel is the pod label whose value is the row's pod_type,
	// as llm-d's predicted-latency-producer sets it (default llm-d.ai/role).
	EndpointRoleLabel string `json:"endpointRoleLabel,omitempty"`
	// PrefillProfile is the disagg handler's prefill profile (default
	// "prefill"): its pick is the prefill pod of a split request.
	PrefillProfile string `json:"prefillProfile,omitempty"`
	// The producers whose attributes are read (default: each one's default).
	PrefixMatchInfoProducerName string `json:"prefixMatchInfoProducerName,omitempty"`
	InFlightLoadProducerName    string `json:"inFlightLoadProducerName,omitempty"`
	TopologyProducerName        string `json:"topologyProducerName,omitempty"`
	// StreamingMode measures TTFT at the first response chunk and sends a
	// TPOT entry at the end, as llm-d's streamingMode; without it TTFT is the
	// whole response (the default, and llm-d's chart).
	StreamingMode bool `json:"streamingMode,omitempty"`
	// TransferTimeHeader is a response header that carries the request's
	// measured KV transfer in ms, for a deployment whose sidecar reports it
	// (default x-kv-transfer-ms); absent, entries carry none.
	TransferTimeHeader string `json:"transferTimeHeader,omitempty"`
	// FlushInterval is how often buffered training entries are posted
	// (default 1s); MaxBatch caps one post (default 1000) and MaxBuffered
	// the entries held between posts (default 10000; more are dropped).
	FlushInterval string `json:"flushInterval,omitempty"`
	MaxBatch      int    `json:"maxBatch,omitempty"`
	MaxBuffered   int    `json:"maxBuffered,omitempty"`
}

// Defaults of ProducerParameters.
const (
	DefaultTimeout            = 50 * time.Millisecond
	DefaultFlushInterval      = time.Second
	DefaultMaxBatch           = 1000
	DefaultMaxBuffered        = 10000
	DefaultTransferTimeHeader = "x-kv-transfer-ms"
	// contextTTL is how long a request's context waits for its response
	// before it is dropped (llm-d's predicted-latency-producer keeps 5 min).
	contextTTL = 5 * time.Minute
	// postTimeout bounds one training post, as llm-d's client's 10 s.
	postTimeout = 10 * time.Second
)

// Clock tells the time the producer measures latencies with; the EPP uses
// the wall clock, a simulation its own.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Producer is headroom-pairs-producer: a DataProducer that ranks each
// request's pairs, and the request-control hooks that report what then
// happened to Headroom's trainer.
type Producer struct {
	typedName fwkplugin.TypedName
	params    ProducerParameters
	timeout   time.Duration
	client    *client // training posts, and ranking unless in process
	ranker    ranker  // client, or a localRanker with RankInProcess
	metrics   *metrics
	clock     Clock

	key, prefixKey, loadKey, topologyKey fwkplugin.DataKey
	decodeRole, prefillRole              *bylabel.ByLabel

	// requests holds each request's context from Produce to the end of its
	// response, by request ID.
	requests sync.Map // string → *requestContext
	// transfers counts, per pod, the split requests dispatched whose first
	// token has not come: the KV transfers on its link.
	transfers transferCounts
	training  *trainingBuffer

	expireMu   sync.Mutex
	lastExpire time.Time
}

var (
	_ requestcontrol.DataProducer            = (*Producer)(nil)
	_ requestcontrol.TimeoutAwareProducer    = (*Producer)(nil)
	_ requestcontrol.PreRequest              = (*Producer)(nil)
	_ requestcontrol.ResponseHeaderProcessor = (*Producer)(nil)
	_ requestcontrol.ResponseBodyProcessor   = (*Producer)(nil)
	_ fwkplugin.ConsumerPlugin               = (*Producer)(nil)
)

// ProducerFactory builds a producer from its parameters.
func ProducerFactory(name string, raw *json.Decoder, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var params ProducerParameters
	if raw != nil {
		if err := raw.Decode(&params); err != nil {
			return nil, fmt.Errorf("%s: parameters: %w", ProducerType, err)
		}
	}
	if handle == nil {
		return nil, fmt.Errorf("%s: no plugin handle", ProducerType)
	}
	if name == "" {
		name = ProducerType
	}
	p, err := NewProducer(name, params, handle.Metrics())
	if err != nil {
		return nil, err
	}
	p.Start(handle.Context())
	return p, nil
}

// NewProducer builds a producer whose series go to reg. Training entries
// are posted by Flush, and every FlushInterval once Start has started the
// producer's loops (the factory starts them for the EPP's lifetime); the
// in-process ranker follows the trainer's bundles once started.
func NewProducer(name string, params ProducerParameters, reg fwkplugin.MetricsRecorder) (*Producer, error) {
	if params.PredictorURL == "" {
		params.PredictorURL = os.Getenv("PREDICTION_SERVER_URL")
	}
	if params.TrainerURL == "" {
		params.TrainerURL = os.Getenv("TRAINING_SERVER_URL")
	}
	predictors := splitURLs(params.PredictorURL)
	if len(predictors) == 0 && !params.RankInProcess {
		return nil, fmt.Errorf("%s: no predictor: set predictorURL or PREDICTION_SERVER_URL, or rankInProcess", ProducerType)
	}
	timeout, err := duration("timeout", params.Timeout, DefaultTimeout)
	if err != nil {
		return nil, err
	}
	flush, err := duration("flushInterval", params.FlushInterval, DefaultFlushInterval)
	if err != nil {
		return nil, err
	}
	switch {
	case params.NonCachedTokens < 0:
		return nil, fmt.Errorf("%s: nonCachedTokens %d: want 0 or more", ProducerType, params.NonCachedTokens)
	case !(params.KVBytesPerToken >= 0) || math.IsInf(params.KVBytesPerToken, 0):
		return nil, fmt.Errorf("%s: kvBytesPerToken %v: want 0 or more", ProducerType, params.KVBytesPerToken)
	case params.MaxBatch < 0 || params.MaxBuffered < 0:
		return nil, fmt.Errorf("%s: maxBatch %d, maxBuffered %d: want 0 (the default) or more", ProducerType, params.MaxBatch, params.MaxBuffered)
	}
	if params.EndpointRoleLabel == "" {
		params.EndpointRoleLabel = bylabel.RoleLabel
	}
	if params.PrefillProfile == "" {
		params.PrefillProfile = "prefill"
	}
	if params.TransferTimeHeader == "" {
		params.TransferTimeHeader = DefaultTransferTimeHeader
	}
	m, err := newMetrics(reg, name)
	if err != nil {
		return nil, fmt.Errorf("%s: metrics: %w", ProducerType, err)
	}
	trainer := ""
	if t := splitURLs(params.TrainerURL); len(t) > 0 {
		trainer = t[0]
	}
	c := newClient(predictors, trainer)
	var r ranker = c
	if params.RankInProcess {
		if r, err = newInProcessRanker(&params, trainer, prometheus.WrapRegistererWith(prometheus.Labels{"plugin": name}, reg)); err != nil {
			return nil, err
		}
	}
	p := &Producer{
		typedName:   fwkplugin.TypedName{Type: ProducerType, Name: name},
		params:      params,
		timeout:     timeout,
		client:      c,
		ranker:      r,
		metrics:     m,
		clock:       wallClock{},
		key:         rankingKey(name),
		prefixKey:   attrprefix.PrefixCacheMatchInfoDataKey.WithNonEmptyProducerName(params.PrefixMatchInfoProducerName),
		loadKey:     attrconcurrency.InFlightLoadDataKey.WithNonEmptyProducerName(params.InFlightLoadProducerName),
		topologyKey: attrtopology.TopologyAttributeKey.WithNonEmptyProducerName(params.TopologyProducerName),
		decodeRole:  bylabel.NewDecodeRole(),
		prefillRole: bylabel.NewPrefillRole(),
	}
	p.training = newTrainingBuffer(c, m, flush, orDefault(params.MaxBatch, DefaultMaxBatch), orDefault(params.MaxBuffered, DefaultMaxBuffered))
	return p, nil
}

func duration(name, v string, def time.Duration) (time.Duration, error) {
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %s %q: want a positive duration such as 50ms", ProducerType, name, v)
	}
	return d, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// newInProcessRanker is the localRanker params configure, following
// trainer's bundles, its series registered with reg.
func newInProcessRanker(params *ProducerParameters, trainer string, reg prometheus.Registerer) (*localRanker, error) {
	if trainer == "" {
		return nil, fmt.Errorf("%s: rankInProcess follows the trainer's bundles: set trainerURL or TRAINING_SERVER_URL", ProducerType)
	}
	keyFile := cmp.Or(params.SigningKeyFile, os.Getenv("HEADROOM_SIGNING_KEY_FILE"))
	var key []byte
	if keyFile != "" {
		data, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: signingKeyFile: %w", ProducerType, err)
		}
		// As Headroom reads --signing-key-file: the key without the
		// whitespace around it.
		if key = bytes.TrimSpace(data); len(key) == 0 {
			return nil, fmt.Errorf("%s: signingKeyFile %s is empty", ProducerType, keyFile)
		}
	}
	if params.SyncInterval == "" {
		if v := os.Getenv("MODEL_SYNC_INTERVAL_SEC"); v != "" {
			params.SyncInterval = strings.TrimSpace(v) + "s"
		}
	}
	interval, err := duration("syncInterval", params.SyncInterval, 0) // 0: the Syncer's default
	if err != nil {
		return nil, err
	}
	objective := predictor.Objective(cmp.Or(params.Objective, os.Getenv("LATENCY_OBJECTIVE_TYPE"), string(predictor.Mean)))
	q := params.Quantile
	if q == 0 {
		q = model.DefaultQuantile
		if v := os.Getenv("LATENCY_QUANTILE_ALPHA"); v != "" {
			if q, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
				return nil, fmt.Errorf("%s: LATENCY_QUANTILE_ALPHA %q: %w", ProducerType, v, err)
			}
		}
	}
	l, err := newLocalRanker(trainer, key, interval, objective, q, reg, slog.Default().With("plugin", ProducerType))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ProducerType, err)
	}
	return l, nil
}

// Start runs the producer's loops until ctx ends: the training buffer's
// posts, and the in-process ranker's following of the trainer's bundles.
func (p *Producer) Start(ctx context.Context) {
	p.training.start(ctx)
	if l, ok := p.ranker.(*localRanker); ok {
		l.start(ctx)
	}
}

// SetClock replaces the wall clock the producer measures latencies with.
func (p *Producer) SetClock(c Clock) { p.clock = c }

// Flush posts the training entries buffered so far.
func (p *Producer) Flush(ctx context.Context) error { return p.training.flush(ctx) }

// TypedName implements fwkplugin.Plugin.
func (p *Producer) TypedName() fwkplugin.TypedName { return p.typedName }

// Produces declares the ranking the scorers read.
func (p *Producer) Produces() map[fwkplugin.DataKey]any {
	return map[fwkplugin.DataKey]any{p.key: Ranking{}}
}

// Consumes declares what a candidate's row is built from: the prompt's
// tokens, the prefix-cache match and in-flight load (required, as llm-d's
// predicted-latency-producer requires them, so the runner creates their
// producers and runs them first) and the topology (which the
// topology-extractor writes as endpoints are discovered).
func (p *Producer) Consumes() fwkplugin.DataDependencies {
	return fwkplugin.DataDependencies{
		Required: map[fwkplugin.DataKey]any{
			p.prefixKey:                          attrprefix.PrefixCacheMatchInfo{},
			p.loadKey:                            attrconcurrency.InFlightLoad{},
			tokenproducer.TokenizedPromptDataKey: fwksched.TokenizedRequest{},
		},
		Optional: map[fwkplugin.DataKey]any{p.topologyKey: attrtopology.Topology{}},
	}
}

// ProduceTimeout is the director's budget for Produce: the call's deadline
// and the work around it.
func (p *Producer) ProduceTimeout() time.Duration { return p.timeout + 10*time.Millisecond }

// requestContext is what the producer keeps of one request until its
// response ends.
type requestContext struct {
	created time.Time
	ranking *Ranking
	input   int64
	// sent is the pairs request's rows, indexed by ranking's prefill and
	// decode maps (row); nil when none were built.
	sent *pairsRequest

	// Set by PreRequest.
	prefillPod, decodePod string
	dispatched            time.Time
	concurrent            int64 // transfers on the busier link, this one included
	predictedTTFT         float64

	// Set by the response hooks.
	transferMs float64
	ttft       time.Duration
	chunks     int

	mu       sync.Mutex // guards released, which expire reads too
	released bool

	// spent is the wall time, in nanoseconds, the plugins have spent on the
	// request's decision so far (Produce, then each scorer and filter call);
	// PreRequest adds its own and observes it. The scheduler runs one
	// request's stages in turn; atomic so that a scheduler that did not
	// would still add every stage.
	spent atomic.Int64
}

// spend adds the wall time since start to the decision time of request's
// context, when Produce kept one.
func (p *Producer) spend(request *fwksched.InferenceRequest, start time.Time) {
	if rc := p.context(request); rc != nil {
		rc.spent.Add(int64(time.Since(start)))
	}
}

// row is the row sent for pod (its decode row when it was a candidate of
// both roles); false when none was.
func (rc *requestContext) row(pod string) (pairCandidate, bool) {
	if c, ok := rc.decodeRow(pod); ok {
		return c, true
	}
	if rc.sent == nil || rc.ranking == nil {
		return pairCandidate{}, false
	}
	if i, ok := rc.ranking.prefill[pod]; ok && i < len(rc.sent.Prefill) {
		return rc.sent.Prefill[i], true
	}
	return pairCandidate{}, false
}

// decodeRow is the row sent for pod as a decode candidate.
func (rc *requestContext) decodeRow(pod string) (pairCandidate, bool) {
	if rc.sent == nil || rc.ranking == nil {
		return pairCandidate{}, false
	}
	if j, ok := rc.ranking.decode[pod]; ok && j < len(rc.sent.Decode) {
		return rc.sent.Decode[j], true
	}
	return pairCandidate{}, false
}

// Produce ranks the request's pairs and stores the ranking on it. It never
// fails the request: an unusable ranking says why, and the scorers then
// score nothing.
func (p *Producer) Produce(ctx context.Context, request *fwksched.InferenceRequest, endpoints []fwksched.Endpoint) error {
	start := time.Now()
	rc := &requestContext{created: p.clock.Now()}
	defer func() { rc.spent.Add(int64(time.Since(start))) }()
	rc.ranking = p.rank(ctx, request, endpoints, rc)
	request.PutAttribute(p.key, rc.ranking)
	p.metrics.outcome(rc.ranking.Fallback)
	if id := requestID(request); id != "" && rc.sent != nil {
		p.requests.Store(id, rc)
	}
	p.expire()
	return nil
}

// rank builds the pairs request from the candidates, asks the predictor,
// and reads its answer into a Ranking.
func (p *Producer) rank(ctx context.Context, request *fwksched.InferenceRequest, endpoints []fwksched.Endpoint, rc *requestContext) *Ranking {
	r := &Ranking{}
	if request.Body == nil || request.Body.TokenizedRequest == nil || request.Body.TokenizedRequest.TokenCount() == 0 {
		r.Fallback = ReasonNoCandidates
		return r
	}
	rc.input = int64(request.Body.TokenizedRequest.TokenCount())
	decode := p.decodeRole.Filter(ctx, request, endpoints)
	prefill := p.prefillRole.Filter(ctx, request, endpoints)
	if len(decode) == 0 {
		r.Fallback = ReasonNoCandidates
		return r
	}
	req := pairsRequest{InputTokenLength: rc.input, KVBytesPerToken: p.params.KVBytesPerToken, Matrix: true}
	// Presized (a candidate is 150 bytes); none stays nil, sent as null.
	if len(prefill) > 0 {
		req.Prefill = make([]pairCandidate, 0, len(prefill))
	}
	req.Decode = make([]pairCandidate, 0, len(decode)) // decode is not empty
	req.TTFTSLOMs, req.TPOTSLOMs = sloHeader(request, metadata.TTFTSLOHeaderKey), sloHeader(request, metadata.TPOTSLOHeaderKey)
	rc.sent = &req
	r.prefill, r.decode = make(map[string]int, len(prefill)), make(map[string]int, len(decode))
	r.splits, r.decideSplit = make([]bool, len(decode)), p.params.DecideSplit
	for _, e := range prefill {
		c, ok := p.candidate(e)
		if !ok {
			r.Fallback = ReasonNoCandidates
			return r
		}
		r.prefill[c.Pod] = len(req.Prefill)
		req.Prefill = append(req.Prefill, c)
	}
	for j, e := range decode {
		c, ok := p.candidate(e)
		if !ok {
			r.Fallback = ReasonNoCandidates
			return r
		}
		r.decode[c.Pod] = j
		req.Decode = append(req.Decode, c)
		r.splits[j] = len(prefill) > 0 && p.deciderSplits(e, rc.input)
	}

	callCtx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	start := time.Now()
	var answer pairsAnswer
	if err := p.ranker.rankPairs(callCtx, &req, &answer); err != nil {
		switch {
		case errors.Is(err, errNoModel):
			r.Fallback = ReasonNoModel
		case errors.Is(err, context.DeadlineExceeded) || callCtx.Err() != nil:
			r.Fallback = ReasonDeadline
		default:
			r.Fallback = ReasonUnavailable
		}
		return r
	}
	p.metrics.call.Observe(time.Since(start).Seconds())
	if !r.read(&answer, len(req.Prefill), len(req.Decode)) {
		r.Fallback = ReasonUnavailable
		return r
	}
	r.decideFallback(answer.Matrix.PrefillExtrapolated, answer.Matrix.DecodeExtrapolated, p.params.TrustExtrapolation)
	return r
}

// read adopts a matrix answer for nP prefill and nD decode candidates;
// false when the answer does not have their shape.
func (r *Ranking) read(a *pairsAnswer, nP, nD int) bool {
	m := &a.Matrix
	if len(m.Rank) != nD || len(m.TTFTMs) != nD || len(m.NoSplitRank) != nD || len(m.NoSplitTTFTMs) != nD ||
		len(m.PrefillExtrapolated) != nP || len(m.DecodeExtrapolated) != nD {
		return false
	}
	for j := range nD {
		if len(m.Rank[j]) != nP || len(m.TTFTMs[j]) != nP {
			return false
		}
	}
	r.rank, r.ttft, r.alone, r.aloneTTFT = m.Rank, m.TTFTMs, m.NoSplitRank, m.NoSplitTTFTMs
	return true
}

// candidate is endpoint e as a pair candidate: its name, topology, row
// fields and the transfers on its link; false without a topology.
func (p *Producer) candidate(e fwksched.Endpoint) (pairCandidate, bool) {
	meta, m := e.GetMetadata(), e.GetMetrics()
	topo, ok := fwkdl.ReadAttribute[*attrtopology.Topology](e, p.topologyKey)
	if !ok || topo == nil || topo.Hostname == "" {
		return pairCandidate{}, false
	}
	name := meta.ID.String()
	c := pairCandidate{
		Pod:      name,
		Topology: topology{Node: topo.Hostname, Rack: topo.Rack, Zone: topo.Zone, Region: topo.Region},
		PodType:  meta.Labels[p.params.EndpointRoleLabel],
	}
	if m != nil {
		c.KVCachePercentage = math.Min(math.Max(m.KVCacheUsagePercent, 0), 1)
		c.NumRequestWaiting = int64(max(m.WaitingQueueSize, 0))
		c.NumRequestRunning = int64(max(m.RunningRequestsSize, 0))
	}
	// The in-flight load the EPP itself committed, as llm-d's
	// predicted-latency-producer reads it: running requests and uncached
	// prefill tokens.
	if raw, ok := e.Get(p.loadKey); ok {
		if load, ok := raw.(*attrconcurrency.InFlightLoad); ok && load != nil {
			c.NumRequestRunning, c.PrefillTokensInFlight = max(load.Requests, 0), max(load.Tokens, 0)
		}
	}
	if raw, ok := e.Get(p.prefixKey); ok {
		if info, ok := raw.(*attrprefix.PrefixCacheMatchInfo); ok && info != nil && info.TotalBlocks() > 0 {
			c.PrefixCacheScore = math.Min(math.Max(float64(info.MatchBlocks())/float64(info.TotalBlocks()), 0), 1)
		}
	}
	c.KVTransfersInFlight = p.transfers.count(name)
	return c, true
}

// deciderSplits reports whether llm-d's prefix-based-pd-decider with
// NonCachedTokens would split a request of input tokens on decode pod e:
// its rule, on the same attribute (the cached blocks, unweighted by tier).
func (p *Producer) deciderSplits(e fwksched.Endpoint, input int64) bool {
	threshold := int64(p.params.NonCachedTokens)
	if threshold == 0 || input < threshold {
		return false
	}
	cached := int64(0)
	if raw, ok := e.Get(p.prefixKey); ok {
		if info, ok := raw.(*attrprefix.PrefixCacheMatchInfo); ok && info != nil {
			cached = int64(info.CachedBlockCount() * info.BlockSizeTokens())
		}
	}
	return input-cached >= threshold
}

// sloHeader is an SLO header in ms (its deprecated alias too); 0 when
// absent or not a positive number, as llm-d's producer reads it.
func sloHeader(request *fwksched.InferenceRequest, key string) float64 {
	v, ok := metadata.GetLowerCaseHeaderValue(request.Headers, key)
	if !ok {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

func requestID(request *fwksched.InferenceRequest) string {
	if request.RequestID != "" {
		return request.RequestID
	}
	return request.Headers["x-request-id"]
}

// expire drops the contexts of requests whose response never ended, at
// most once a second.
func (p *Producer) expire() {
	now := p.clock.Now()
	p.expireMu.Lock()
	due := now.Sub(p.lastExpire) >= time.Second
	if due {
		p.lastExpire = now
	}
	p.expireMu.Unlock()
	if !due {
		return
	}
	p.requests.Range(func(k, v any) bool {
		rc := v.(*requestContext)
		if now.Sub(rc.created) > contextTTL {
			p.requests.Delete(k)
			p.release(rc)
		}
		return true
	})
}
