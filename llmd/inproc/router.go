// Package inproc runs llm-d's scheduling in this process: an
// EndpointPickerConfig loaded by llm-d's own loader, its plugins (llm-d's
// and Headroom's), the data producers in the order the runner gives them,
// the scheduler with the config's profiles and profile handler, and the
// request-control hooks around it, as the EPP's director runs them for one
// request. The caller hands it endpoints with their metrics and attributes
// (what the EPP's data layer discovers and scrapes) and the response's
// events (what the EPP sees of the model server's answer), so tests and
// simulations drive llm-d's real scheduler without a cluster or Envoy.
package inproc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/llm-d/llm-d-router/pkg/epp/config/loader"
	"github.com/llm-d/llm-d-router/pkg/epp/datalayer"
	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requestcontrol"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	"github.com/llm-d/llm-d-router/pkg/epp/scheduling"

	"github.com/headroomhq/headroom/llmd/plugins"
)

// defaultProducerTimeout is the director's budget for a data producer that
// names none (llm-d's dataProducerTimeout).
const defaultProducerTimeout = 400 * time.Millisecond

// Router is one EndpointPickerConfig's scheduling, built once.
type Router struct {
	handle    fwkplugin.Handle
	scheduler *scheduling.Scheduler

	producers      []requestcontrol.DataProducer // in dependency order
	preRequest     []requestcontrol.PreRequest
	responseHeader []requestcontrol.ResponseHeaderProcessor
	responseBody   []requestcontrol.ResponseBodyProcessor

	// extractors are the plugins' extractors of endpoint events
	// (datalayer.go).
	extractors []fwkdl.EndpointExtractor

	mu   sync.Mutex
	pods []types.NamespacedName // what the handle's pod list reports
	// servers are the data layer's model servers (Endpoint), by ID.
	servers map[types.NamespacedName]*fwkdl.ModelServer
}

// New loads config (YAML) with llm-d's loader, after registering the
// plugins it may name (llm-d's P/D plugins and Headroom's), and builds its
// scheduler. Plugins' series go to reg; ctx is the plugins' lifetime (their
// background loops end with it).
func New(ctx context.Context, config []byte, reg prometheus.Registerer) (*Router, error) {
	register()
	log := logr.Discard()
	raw, _, err := loader.LoadRawConfig(config, log)
	if err != nil {
		return nil, fmt.Errorf("inproc: %w", err)
	}
	r := &Router{servers: map[types.NamespacedName]*fwkdl.ModelServer{}}
	r.handle = fwkplugin.NewEppHandle(ctx, r.podList, fwkplugin.WithMetricsRecorder(reg))
	cfg, err := loader.InstantiateAndConfigure(raw, r.handle, log)
	if err != nil {
		return nil, fmt.Errorf("inproc: %w", err)
	}
	// As the runner: producers that consumers need and the config leaves
	// out, then the producers' order, then each plugin's data scope.
	if err := datalayer.CreateMissingDataProducers(ctx, fwkplugin.DefaultProducerRegistry, fwkplugin.Registry, r.handle); err != nil {
		return nil, fmt.Errorf("inproc: %w", err)
	}
	all := r.handle.GetAllPlugins()
	order, err := datalayer.ValidateAndOrderDataDependencies(all)
	if err != nil {
		return nil, fmt.Errorf("inproc: %w", err)
	}
	datalayer.RegisterScopeSpecs(all)
	if r.extractors, err = wireEndpointExtractors(all); err != nil {
		return nil, err
	}
	byName := map[string]fwkplugin.Plugin{}
	for _, p := range all {
		byName[p.TypedName().String()] = p
		if h, ok := p.(requestcontrol.PreRequest); ok {
			r.preRequest = append(r.preRequest, h)
		}
		if h, ok := p.(requestcontrol.ResponseHeaderProcessor); ok {
			r.responseHeader = append(r.responseHeader, h)
		}
		if h, ok := p.(requestcontrol.ResponseBodyProcessor); ok {
			r.responseBody = append(r.responseBody, h)
		}
	}
	for _, name := range order {
		if p, ok := byName[name].(requestcontrol.DataProducer); ok {
			r.producers = append(r.producers, p)
		}
	}
	r.scheduler = scheduling.NewSchedulerWithConfig(cfg.SchedulerConfig)
	return r, nil
}

func (r *Router) podList() []types.NamespacedName {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]types.NamespacedName(nil), r.pods...)
}

// Plugin returns the config's plugin of that name, nil when none.
func (r *Router) Plugin(name string) fwkplugin.Plugin { return r.handle.Plugin(name) }

// Plugins returns every plugin of the config, those the runner adds
// included.
func (r *Router) Plugins() []fwkplugin.Plugin { return r.handle.GetAllPlugins() }

// Schedule runs request through the data producers (each within its
// timeout, as the director gives it), the scheduler and the PreRequest
// hooks, on endpoints, and returns the scheduler's result.
func (r *Router) Schedule(ctx context.Context, request *fwksched.InferenceRequest, endpoints []fwksched.Endpoint) (*fwksched.SchedulingResult, error) {
	r.mu.Lock()
	r.pods = r.pods[:0]
	for _, e := range endpoints {
		r.pods = append(r.pods, e.GetMetadata().ID)
	}
	r.mu.Unlock()
	for _, p := range r.producers {
		timeout := defaultProducerTimeout
		if tp, ok := p.(requestcontrol.TimeoutAwareProducer); ok && tp.ProduceTimeout() > 0 {
			timeout = tp.ProduceTimeout()
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := p.Produce(pctx, request, endpoints)
		cancel()
		if err != nil {
			// The director logs a producer's error and schedules anyway.
			continue
		}
	}
	result, err := r.scheduler.Schedule(ctx, request, endpoints)
	if err != nil {
		return nil, fmt.Errorf("inproc: schedule %s: %w", request.RequestID, err)
	}
	request.SchedulingResult = result
	for _, h := range r.preRequest {
		if err := h.PreRequest(ctx, request, result); err != nil {
			return result, fmt.Errorf("inproc: %s: %w", h.TypedName(), err)
		}
	}
	return result, nil
}

// ResponseHeader runs the hooks for the response's headers from target.
func (r *Router) ResponseHeader(ctx context.Context, request *fwksched.InferenceRequest, response *requestcontrol.Response, target *fwkdl.EndpointMetadata) {
	for _, h := range r.responseHeader {
		h.ResponseHeader(ctx, request, response, target)
	}
}

// ResponseBody runs the hooks for one chunk of the response (the last one
// with response.EndOfStream).
func (r *Router) ResponseBody(ctx context.Context, request *fwksched.InferenceRequest, response *requestcontrol.Response, target *fwkdl.EndpointMetadata) {
	for _, h := range r.responseBody {
		h.ResponseBody(ctx, request, response, target)
	}
}

// Producers returns the config's Headroom producers.
func (r *Router) Producers() []*plugins.Producer {
	var out []*plugins.Producer
	for _, p := range r.handle.GetAllPlugins() {
		if hp, ok := p.(*plugins.Producer); ok {
			out = append(out, hp)
		}
	}
	return out
}

// Producer returns the config's Headroom producer of that name, nil when
// none.
func (r *Router) Producer(name string) *plugins.Producer {
	p, _ := r.handle.Plugin(name).(*plugins.Producer)
	return p
}
