package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/profilehandler/disagg"
)

// Plugin types of the scorers and the filter.
const (
	DecodeScorerType  = "headroom-decode-scorer"
	PrefillScorerType = "headroom-prefill-scorer"
	SplitFilterType   = "headroom-split-filter"
)

// ReaderParameters configure a plugin that reads a producer's ranking.
type ReaderParameters struct {
	// Producer names the headroom-pairs-producer whose ranking is read
	// (default: the one of that type's default name).
	Producer string `json:"producer,omitempty" pluginRef:""`
}

// ReaderParser reads ReaderParameters, defaulting the producer, so that
// llm-d's loader builds the producer before its readers.
func ReaderParser(raw *json.Decoder, _ fwkplugin.Handle) (any, error) {
	var params ReaderParameters
	if raw != nil {
		if err := raw.Decode(&params); err != nil {
			return nil, err
		}
	}
	if params.Producer == "" {
		params.Producer = ProducerType
	}
	return params, nil
}

// producerOf finds the producer a reader's parameters name.
func producerOf(pluginType string, raw *json.Decoder, handle fwkplugin.Handle) (*Producer, error) {
	parsed, err := ReaderParser(raw, handle)
	if err != nil {
		return nil, fmt.Errorf("%s: parameters: %w", pluginType, err)
	}
	name := parsed.(ReaderParameters).Producer
	if handle == nil {
		return nil, fmt.Errorf("%s: no plugin handle", pluginType)
	}
	p, ok := handle.Plugin(name).(*Producer)
	if !ok {
		return nil, fmt.Errorf("%s: producer %q is not a %s in the config", pluginType, name, ProducerType)
	}
	return p, nil
}

// reader is what the scorers and the filter share: their producer's
// ranking on each request.
type reader struct {
	typedName fwkplugin.TypedName
	producer  *Producer
}

func (r *reader) TypedName() fwkplugin.TypedName { return r.typedName }

// Consumes declares the producer's ranking.
func (r *reader) Consumes() fwkplugin.DataDependencies {
	return fwkplugin.DataDependencies{Required: map[fwkplugin.DataKey]any{r.producer.key: Ranking{}}}
}

func (r *reader) ranking(request *fwksched.InferenceRequest) *Ranking {
	rk := readRanking(request, r.producer.key)
	if !rk.usable() {
		return nil
	}
	return rk
}

// peer is the decode pick the disagg profile handler publishes before the
// prefill profile runs, by endpoint name.
func peer(request *fwksched.InferenceRequest) (string, bool) {
	e, ok := fwksched.ReadRequestAttribute[fwksched.Endpoint](request, disagg.PeerEndpointAttributeKey)
	if !ok || e == nil || e.GetMetadata() == nil {
		return "", false
	}
	return e.GetMetadata().ID.String(), true
}

func newReader(pluginType, name string, raw *json.Decoder, handle fwkplugin.Handle) (reader, error) {
	p, err := producerOf(pluginType, raw, handle)
	if err != nil {
		return reader{}, err
	}
	if name == "" {
		name = pluginType
	}
	return reader{typedName: fwkplugin.TypedName{Type: pluginType, Name: name}, producer: p}, nil
}

// DecodeScorer is headroom-decode-scorer: in the decode profile, each
// decode pod by the best option through it (Ranking.decodeScores).
type DecodeScorer struct{ reader }

var _ fwksched.Scorer = (*DecodeScorer)(nil)

// DecodeScorerFactory builds a decode scorer.
func DecodeScorerFactory(name string, raw *json.Decoder, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	r, err := newReader(DecodeScorerType, name, raw, handle)
	return &DecodeScorer{r}, err
}

// Category implements fwksched.Scorer.
func (s *DecodeScorer) Category() fwksched.ScorerCategory { return fwksched.Distribution }

// Score scores nothing unless the request's ranking is usable.
func (s *DecodeScorer) Score(_ context.Context, request *fwksched.InferenceRequest, endpoints []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	defer s.producer.spend(request, time.Now())
	rk := s.ranking(request)
	if rk == nil {
		return nil
	}
	return rk.decodeScores(endpoints)
}

// PrefillScorer is headroom-prefill-scorer: in the prefill profile, in
// place of topology-affinity-scorer, each prefill pod by the predicted
// TTFT of its pair with the decode pick (Ranking.prefillScores).
type PrefillScorer struct{ reader }

var _ fwksched.Scorer = (*PrefillScorer)(nil)

// PrefillScorerFactory builds a prefill scorer.
func PrefillScorerFactory(name string, raw *json.Decoder, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	r, err := newReader(PrefillScorerType, name, raw, handle)
	return &PrefillScorer{r}, err
}

// Category implements fwksched.Scorer: as topology-affinity-scorer's.
func (s *PrefillScorer) Category() fwksched.ScorerCategory { return fwksched.Affinity }

// Score scores nothing unless the ranking is usable and ranks the peer.
func (s *PrefillScorer) Score(_ context.Context, request *fwksched.InferenceRequest, endpoints []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	defer s.producer.spend(request, time.Now())
	rk := s.ranking(request)
	if rk == nil {
		return nil
	}
	name, ok := peer(request)
	if !ok {
		return nil
	}
	scores, ok := rk.prefillScores(name, endpoints)
	if !ok {
		s.producer.metrics.outcome(ReasonPeerUnranked)
		return nil
	}
	return scores
}

// SplitFilter is headroom-split-filter: in the prefill profile, it leaves
// no prefill pod when the decode pick is predicted better alone than with
// any, so the disagg profile handler does not split the request; it keeps
// every pod otherwise, and when the ranking is unusable.
type SplitFilter struct{ reader }

var _ fwksched.Filter = (*SplitFilter)(nil)

// SplitFilterFactory builds a split filter.
func SplitFilterFactory(name string, raw *json.Decoder, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	r, err := newReader(SplitFilterType, name, raw, handle)
	return &SplitFilter{r}, err
}

// Filter implements fwksched.Filter.
func (f *SplitFilter) Filter(_ context.Context, request *fwksched.InferenceRequest, endpoints []fwksched.Endpoint) []fwksched.Endpoint {
	defer f.producer.spend(request, time.Now())
	rk := f.ranking(request)
	if rk == nil {
		return endpoints
	}
	name, ok := peer(request)
	if !ok {
		return endpoints
	}
	if alone, ok := rk.aloneIsBetter(name); ok && alone {
		return []fwksched.Endpoint{}
	}
	return endpoints
}
