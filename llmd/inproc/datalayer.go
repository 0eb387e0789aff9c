package inproc

import (
	"context"
	"fmt"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	sourcenotifications "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/source/notifications"
)

// The EPP's data layer, as far as scheduling reads it: the model servers
// it discovered, each announced once to the plugins that extract from
// endpoint events (llm-d's topology-extractor writes the Topology
// attribute from the pod's labels; its in-flight load producer attaches
// the live InFlightLoad attribute its counts are read through), their
// metrics replaced at every scrape, and, per request, a snapshot of each
// as the director hands it to the scheduler. Pod and metrics sources
// (Kubernetes watches, scrapes) are the caller's: it names the endpoints
// and their metrics.

// endpointRegistrar collects, from the plugins' declared dependencies, the
// extractors the runner would wire to its endpoint-notification source;
// other sources (Kubernetes notifications, metrics) are left unwired.
type endpointRegistrar struct {
	extractors []fwkdl.EndpointExtractor
}

func (e *endpointRegistrar) Register(p fwkdl.PendingRegistration) error {
	if p.SourceType != sourcenotifications.EndpointNotificationSourceType {
		return nil
	}
	x, ok := p.Extractor.(fwkdl.EndpointExtractor)
	if !ok {
		return fmt.Errorf("%s registers %T for endpoint events, which does not extract them", p.Owner, p.Extractor)
	}
	e.extractors = append(e.extractors, x)
	return nil
}

// wireEndpointExtractors asks every plugin for its data-layer dependencies.
func wireEndpointExtractors(all []fwkplugin.Plugin) ([]fwkdl.EndpointExtractor, error) {
	var reg endpointRegistrar
	for _, p := range all {
		if r, ok := p.(fwkdl.Registrant); ok {
			if err := r.RegisterDependencies(&reg); err != nil {
				return nil, fmt.Errorf("inproc: %s: %w", p.TypedName(), err)
			}
		}
	}
	return reg.extractors, nil
}

// Endpoint is the model server meta names, as the data layer holds it: new
// ones are announced to the endpoint extractors (an add event, as
// discovery sends one); metrics replace the last scrape's. It returns the
// snapshot the director would schedule on: meta, metrics and a copy of the
// attributes (the dynamic ones read now). Metadata other than the first
// seen (labels) is not updated: a pod's labels do not change under a
// running EPP.
func (r *Router) Endpoint(ctx context.Context, meta *fwkdl.EndpointMetadata, metrics *fwkdl.Metrics) (fwksched.Endpoint, error) {
	r.mu.Lock()
	ep, ok := r.servers[meta.ID]
	if !ok {
		ep = fwkdl.NewEndpoint(meta, metrics)
		r.servers[meta.ID] = ep
	}
	r.mu.Unlock()
	if !ok {
		for _, x := range r.extractors {
			if err := x.Extract(ctx, fwkdl.EndpointEvent{Type: fwkdl.EventAddOrUpdate, Endpoint: ep}); err != nil {
				return nil, fmt.Errorf("inproc: %s on endpoint %s: %w", x.TypedName(), meta.ID, err)
			}
		}
	} else {
		ep.UpdateMetrics(metrics)
	}
	return fwksched.NewEndpoint(ep.GetMetadata(), ep.GetMetrics(), ep.GetAttributes()), nil
}
