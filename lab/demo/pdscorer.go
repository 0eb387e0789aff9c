package demo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/wire"
)

// PairScorer is sim.PairScorer over Headroom's POST /predict/pairs, as a
// pair-aware endpoint picker would call it: one request per scheduling
// decision, with every prefill and decode candidate (the per-pod fields of
// /predict/bulk/strict, its placement and the KV transfers on it now), and
// every route ranked in the answer: each pair's TTFT (the TTFT model on the
// prefill pod's row, which holds the first decode step, + transfer + the
// decode pod's load beyond the lightest's) and the decode pods alone.
type PairScorer struct {
	Client *Client
	// Timeout bounds one call; llm-d gives up on a prediction after 400 ms.
	Timeout         time.Duration
	KVBytesPerToken float64

	ctx  context.Context
	req  wire.PairsRequest
	body []byte
}

// Bind sets the context calls run under; ScorePairs cannot take one,
// because sim.PairScorer's signature is the simulator's.
func (s *PairScorer) Bind(ctx context.Context) { s.ctx = ctx }

// pairsAnswer is the part of the answer the router acts on.
type pairsAnswer struct {
	Pairs         []pairOption `json:"pairs"`
	NoSplit       []pairOption `json:"no_split"`
	TransferModel bool         `json:"kv_transfer_model"`
}

type pairOption struct {
	PrefillIndex *int    `json:"prefill_index"` // null without a split
	DecodeIndex  int     `json:"decode_index"`
	Split        bool    `json:"split"`
	TTFTMs       float64 `json:"ttft_ms"`
	TPOTMs       float64 `json:"tpot_ms"`
	PrefillMs    float64 `json:"prefill_ms"`
	TransferMs   float64 `json:"kv_transfer_ms"`
	DecodeLoad   float64 `json:"decode_load_ms"`
	Extrapolated bool    `json:"extrapolated"`
}

func candidates(dst []wire.PairCandidate, req *sim.Request, pool string, pods []sim.PodState) []wire.PairCandidate {
	dst = dst[:0]
	for i, p := range pods {
		row := predictRow(p.Row(req))
		row.PodType = pool
		dst = append(dst, wire.PairCandidate{Pod: PodName(pool, i), Topology: p.Topology, Row: row,
			Concurrent: int64(p.Transfers) + 1})
	}
	return dst
}

// ScorePairs implements sim.PairScorer. Before the first model it returns
// sim.ErrNoModel (wrapped), so that the router counts a cold start.
func (s *PairScorer) ScorePairs(req *sim.Request, prefill, decode []sim.PodState) ([]sim.PairEstimate, error) {
	s.req.InputTokenLength, s.req.NumTokensGenerated = int64(req.PromptTokens), 1
	s.req.KVBytesPerToken = s.KVBytesPerToken
	s.req.Prefill = candidates(s.req.Prefill, req, "prefill", prefill)
	s.req.Decode = candidates(s.req.Decode, req, "decode", decode)
	// Every option: the router chooses among them all, by its own rule
	// (the route returns DefaultPairsK of each unless asked).
	s.req.K = max(len(prefill)*len(decode), len(decode))
	s.body = wire.AppendPairsRequest(s.body[:0], &s.req)
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 400 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ans pairsAnswer
	if err := s.Client.post(ctx, s.Client.PredictorURL+"/predict/pairs", s.body, http.StatusOK, &ans); err != nil {
		if errors.Is(err, ErrNotReady) {
			return nil, fmt.Errorf("%w: %w", sim.ErrNoModel, err)
		}
		return nil, err
	}
	if len(ans.Pairs) == 0 && !ans.TransferModel && len(prefill) > 0 {
		// The TTFT and TPOT models exist, the transfer model not yet: the
		// pairs cannot be predicted, which is a cold start too.
		return nil, fmt.Errorf("%w: no transfer model", sim.ErrNoModel)
	}
	out := make([]sim.PairEstimate, 0, len(ans.Pairs)+len(ans.NoSplit))
	for _, o := range append(ans.Pairs, ans.NoSplit...) {
		e := sim.PairEstimate{Prefill: sim.NoSplit, Decode: o.DecodeIndex, TTFTMs: o.TTFTMs, TPOTMs: o.TPOTMs,
			Extrapolated: o.Extrapolated}
		if o.Split {
			if o.PrefillIndex == nil {
				return nil, fmt.Errorf("predict pairs: a split option without prefill_index")
			}
			e.Prefill, e.PrefillMs, e.TransferMs, e.DecodeMs = *o.PrefillIndex, o.PrefillMs, o.TransferMs, o.DecodeLoad
		}
		out = append(out, e)
	}
	return out, nil
}
