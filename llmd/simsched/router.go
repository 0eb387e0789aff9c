package simsched

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requestcontrol"
	fwkrh "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requesthandling"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/filter/bylabel"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/picker/maxscore"

	"github.com/headroomhq/headroom/llmd/inproc"
	"github.com/headroomhq/headroom/llmd/plugins"
)

// namespace is the simulated endpoints' namespace.
const namespace = "sim"

// router is one config in llm-d's scheduler and the requests it has in
// flight. Its calls come one at a time (mu): the simulator is one loop.
type router struct {
	ctx    context.Context
	cancel context.CancelFunc
	sched  *inproc.Router
	reg    *prometheus.Registry
	clock  *simClock
	// producers are the config's Headroom producers, which post entries.
	producers []*plugins.Producer
	// indexUpdates are llm-d's prefix index updates in flight, waited for
	// after each decision (settle.go).
	indexUpdates indexUpdates

	mu sync.Mutex
	// inFlight holds each scheduled request until its End event, by ID.
	inFlight map[string]*scheduled
}

// scheduled is a request llm-d scheduled whose response has not ended.
type scheduled struct {
	req    *fwksched.InferenceRequest
	target *fwkdl.EndpointMetadata // the decode pod, whose response it is
	// ctx lives as long as the request, as the ext_proc stream's does:
	// llm-d's in-flight load producer holds its counts while it is alive.
	ctx    context.Context
	cancel context.CancelFunc
	chunks int
}

// newRouter loads config into llm-d's scheduler, its Headroom producers'
// parameters overridden by producer, its approximate prefix producers' by
// prefixIndex and its pickers seeded with seed (picker.go), each producer
// on the router's clock.
func newRouter(parent context.Context, config []byte, producer, prefixIndex map[string]any, seed uint64) (*router, error) {
	config, err := withParameters(config, plugins.ProducerType, producer, true)
	if err != nil {
		return nil, err
	}
	if config, err = withParameters(config, approximateprefix.ApproxPrefixCachePluginType, prefixIndex, true); err != nil {
		return nil, err
	}
	// A config that names no picker gets the loader's default one, seeded
	// with 0.
	if config, err = withParameters(config, maxscore.MaxScorePickerType, map[string]any{seedParameter: seed}, false); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(parent)
	reg := prometheus.NewRegistry()
	sched, err := inproc.New(ctx, config, reg)
	if err != nil {
		cancel()
		return nil, err
	}
	updates, err := prefixIndexUpdates(sched.Plugins())
	if err != nil {
		cancel()
		return nil, err
	}
	rt := &router{ctx: ctx, cancel: cancel, sched: sched, reg: reg, clock: &simClock{}, producers: sched.Producers(),
		indexUpdates: updates, inFlight: map[string]*scheduled{}}
	for _, p := range rt.producers {
		p.SetClock(rt.clock)
	}
	return rt, nil
}

// withParameters merges params into the parameters of every plugin of
// type pluginType in config; with required, params given for a type the
// config lacks are an error.
func withParameters(config []byte, pluginType string, params map[string]any, required bool) ([]byte, error) {
	if len(params) == 0 {
		return config, nil
	}
	var doc map[string]any
	if err := yaml.Unmarshal(config, &doc); err != nil {
		return nil, fmt.Errorf("%w: config: %v", errBadRequest, err)
	}
	list, _ := doc["plugins"].([]any)
	found := false
	for _, p := range list {
		spec, ok := p.(map[string]any)
		if !ok || spec["type"] != pluginType {
			continue
		}
		found = true
		merged, _ := spec["parameters"].(map[string]any)
		if merged == nil {
			merged = map[string]any{}
		}
		for k, v := range params {
			merged[k] = v
		}
		spec["parameters"] = merged
	}
	if !found && required {
		return nil, fmt.Errorf("%w: %s parameters given, but the config has no %s", errBadRequest, pluginType, pluginType)
	}
	return json.Marshal(doc) // JSON is YAML to llm-d's loader
}

func (rt *router) close() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for id, s := range rt.inFlight {
		s.cancel()
		delete(rt.inFlight, id)
	}
	rt.cancel()
}

// schedule delivers req's events, then runs llm-d's scheduling of its
// request at its time.
func (rt *router) schedule(req *ScheduleRequest) (*ScheduleAnswer, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.events(req.Events); err != nil {
		return nil, err
	}
	if err := req.Request.validate(); err != nil {
		return nil, err
	}
	if len(req.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: request %s: no endpoints", errBadRequest, req.Request.ID)
	}
	if _, ok := rt.inFlight[req.Request.ID]; ok {
		return nil, fmt.Errorf("%w: request %s is already scheduled", errBadRequest, req.Request.ID)
	}
	rt.clock.set(req.NowNs)
	endpoints := make([]fwksched.Endpoint, len(req.Endpoints))
	for i, e := range req.Endpoints {
		meta, metrics := e.server()
		ep, err := rt.sched.Endpoint(rt.ctx, meta, metrics)
		if err != nil {
			return nil, err
		}
		endpoints[i] = ep
	}
	ir := req.Request.inferenceRequest()
	ctx, cancel := context.WithCancel(rt.ctx)
	result, err := rt.sched.Schedule(ctx, ir, endpoints)
	rt.indexUpdates.wait()
	if err != nil {
		cancel()
		return nil, err
	}
	answer := &ScheduleAnswer{}
	var target *fwkdl.EndpointMetadata
	for name, pr := range result.ProfileResults {
		if pr == nil || len(pr.TargetEndpoints) == 0 {
			continue
		}
		meta := pr.TargetEndpoints[0].GetMetadata()
		if name == result.PrimaryProfileName {
			answer.Decode, target = meta.ID.Name, meta
		} else {
			answer.Prefill = meta.ID.Name
		}
	}
	if target == nil {
		cancel()
		return nil, fmt.Errorf("request %s: llm-d's scheduler picked no endpoint in its primary profile %q", req.Request.ID, result.PrimaryProfileName)
	}
	rt.inFlight[req.Request.ID] = &scheduled{req: ir, target: target, ctx: ctx, cancel: cancel}
	return answer, nil
}

// deliver delivers events and, with flush, posts the producers' entries.
func (rt *router) deliver(ctx context.Context, events []Event, flush bool) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.events(events); err != nil {
		return err
	}
	if !flush {
		return nil
	}
	for _, p := range rt.producers {
		if err := p.Flush(ctx); err != nil {
			return fmt.Errorf("flush the training entries: %w", err)
		}
	}
	return nil
}

// events plays each event's response to llm-d's hooks, as the EPP's
// director does: the headers and the first chunk at the first token, one
// chunk per further token, the last one at the end.
func (rt *router) events(events []Event) error {
	for _, ev := range events {
		s, ok := rt.inFlight[ev.ID]
		if !ok {
			return fmt.Errorf("%w: %s event for request %q, which is not in flight", errBadRequest, ev.Kind, ev.ID)
		}
		rt.clock.set(ev.AtNs)
		id := s.req.RequestID
		switch ev.Kind {
		case FirstToken:
			if s.chunks > 0 {
				return fmt.Errorf("%w: request %s: a second first token", errBadRequest, id)
			}
			headers := map[string]string{}
			if ev.TransferMs > 0 && !math.IsInf(ev.TransferMs, 0) {
				headers[plugins.DefaultTransferTimeHeader] = fmt.Sprintf("%.3f", ev.TransferMs)
			}
			rt.sched.ResponseHeader(s.ctx, s.req, &requestcontrol.Response{RequestID: id, Headers: headers, StartOfStream: true}, s.target)
			rt.sched.ResponseBody(s.ctx, s.req, &requestcontrol.Response{RequestID: id, StartOfStream: true}, s.target)
			s.chunks = 1
		case End:
			if s.chunks == 0 {
				// Rejected before its first token: the stream ends at once.
				rt.sched.ResponseBody(s.ctx, s.req, &requestcontrol.Response{RequestID: id, StartOfStream: true, EndOfStream: true}, s.target)
			} else {
				// A one-token answer still ends with a chunk of its own.
				for ; s.chunks < max(ev.OutputTokens, 2)-1; s.chunks++ {
					rt.sched.ResponseBody(s.ctx, s.req, &requestcontrol.Response{RequestID: id}, s.target)
				}
				rt.sched.ResponseBody(s.ctx, s.req, &requestcontrol.Response{RequestID: id, EndOfStream: true}, s.target)
			}
			s.cancel()
			delete(rt.inFlight, ev.ID)
		default:
			return fmt.Errorf("%w: event kind %q: want %s or %s", errBadRequest, ev.Kind, FirstToken, End)
		}
	}
	return nil
}

// report reads the Headroom plugins' counters.
func (rt *router) report() (*Report, error) {
	families, err := rt.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("read the plugins' metrics: %w", err)
	}
	r := &Report{Decisions: map[string]int{}, TrainingEntries: map[string]int{}}
	for _, f := range families {
		into, label := map[string]map[string]int{
			"headroom_epp_decisions_total":        r.Decisions,
			"headroom_epp_training_entries_total": r.TrainingEntries,
		}[f.GetName()], map[string]string{
			"headroom_epp_decisions_total":        "outcome",
			"headroom_epp_training_entries_total": "result",
		}[f.GetName()]
		if into == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					into[l.GetValue()] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return r, nil
}

// validate checks what inferenceRequest relies on.
func (r *Request) validate() error {
	switch {
	case r.ID == "":
		return fmt.Errorf("%w: a request without an id", errBadRequest)
	case r.PromptTokens < 1 || r.PromptTokens > 1<<20:
		return fmt.Errorf("%w: request %s: %d prompt tokens, want 1 to %d", errBadRequest, r.ID, r.PromptTokens, 1<<20)
	case r.BlockSize < 1 || r.BlockSize > 1024:
		return fmt.Errorf("%w: request %s: block size %d, want 1 to 1024", errBadRequest, r.ID, r.BlockSize)
	case len(r.BlockHashes) > r.PromptTokens/r.BlockSize:
		return fmt.Errorf("%w: request %s: %d block hashes for %d full blocks", errBadRequest, r.ID, len(r.BlockHashes), r.PromptTokens/r.BlockSize)
	}
	return nil
}

// inferenceRequest is r as the EPP's request parser leaves it: a completion
// whose prompt is already tokenized (Tokens), with its request ID header.
func (r *Request) inferenceRequest() *fwksched.InferenceRequest {
	headers := map[string]string{"x-request-id": r.ID}
	for k, v := range r.Headers {
		headers[k] = v
	}
	return &fwksched.InferenceRequest{RequestID: r.ID, TargetModel: "sim", Headers: headers,
		Body: &fwkrh.InferenceRequestBody{
			Completions:      &fwkrh.CompletionsRequest{Prompt: fwkrh.Prompt{Raw: "simulated request " + r.ID}},
			TokenizedRequest: &fwkrh.TokenizedRequest{Prompts: []fwkrh.PromptTokens{{TokenIDs: r.Tokens()}}},
		}}
}

// Tokens makes token IDs of the prompt: a token of a full block whose chain
// hash is known is a function of that hash and its place in the block, so
// two prompts share a prefix of tokens exactly where they share one of
// blocks (the hash covers the block and all before it); the other tokens
// are the request's own.
func (r *Request) Tokens() []uint32 {
	out := make([]uint32, r.PromptTokens)
	salt := uint64(0x5bd1e995)
	for _, c := range r.ID {
		salt = mix(salt ^ uint64(c))
	}
	for i := range out {
		b := i / r.BlockSize
		seed := salt ^ uint64(i)<<20
		if b < len(r.BlockHashes) {
			seed = r.BlockHashes[b] ^ uint64(i%r.BlockSize)<<48
		}
		out[i] = uint32(mix(seed) % vocabulary)
	}
	return out
}

// vocabulary bounds the made-up token IDs, as a tokenizer's does.
const vocabulary = 150_000

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// server is e as the data layer discovers and scrapes it: a pod with its
// role label and the well-known topology labels llm-d's
// topology-extractor reads, and its gauges.
func (e *Endpoint) server() (*fwkdl.EndpointMetadata, *fwkdl.Metrics) {
	labels := map[string]string{bylabel.RoleLabel: e.Role}
	for k, v := range map[string]string{
		corev1.LabelHostname: e.Topology.Node, rackLabel: e.Topology.Rack,
		corev1.LabelTopologyZone: e.Topology.Zone, corev1.LabelTopologyRegion: e.Topology.Region,
	} {
		if v != "" {
			labels[k] = v
		}
	}
	meta := &fwkdl.EndpointMetadata{
		ID:      types.NamespacedName{Namespace: namespace, Name: e.Name},
		Address: "127.0.0.1", Port: "8000", Labels: labels,
	}
	m := fwkdl.NewMetrics()
	m.WaitingQueueSize, m.RunningRequestsSize, m.KVCacheUsagePercent = e.Waiting, e.Running, e.KVCache
	return meta, m
}

// rackLabel is the rack label llm-d's topology-extractor reads by default
// (Kubernetes has no well-known one).
const rackLabel = "topology.kubernetes.io/rack"

// simClock is the simulator's time, as the last call set it.
type simClock struct{ ns atomic.Int64 }

var _ plugins.Clock = (*simClock)(nil)

func (c *simClock) set(ns int64)   { c.ns.Store(ns) }
func (c *simClock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }
