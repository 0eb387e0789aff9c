package plugins

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/wire"
)

// The in-process ranker's answers before any ranking: no bundle is
// errNoModel (the no_model fallback), more candidates than a predictor
// takes is refused whatever the bundle, and a request past its deadline
// is not ranked.
func TestLocalRankerBeforeRanking(t *testing.T) {
	l, err := newLocalRanker("http://127.0.0.1:1", nil, 0, predictor.Mean, 0.9, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req := func(nD int) *pairsRequest {
		r := &pairsRequest{InputTokenLength: 100, Prefill: []pairCandidate{{Pod: "p"}}}
		for range nD {
			r.Decode = append(r.Decode, pairCandidate{Pod: "d"})
		}
		return r
	}
	late, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		req  *pairsRequest
		want func(error) bool
	}{
		{"no bundle yet", context.Background(), req(1), func(err error) bool { return errors.Is(err, errNoModel) }},
		{"too many candidates", context.Background(), req(wire.DefaultMaxPairCandidates + 1), func(err error) bool {
			return err != nil && !errors.Is(err, errNoModel) && strings.Contains(err.Error(), "more than")
		}},
		{"past the deadline", late, req(1), func(err error) bool { return errors.Is(err, context.Canceled) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := l.rankPairs(tt.ctx, tt.req, &pairsAnswer{}); !tt.want(err) {
				t.Errorf("error %v", err)
			}
		})
	}
}
