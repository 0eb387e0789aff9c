package sim

import (
	"github.com/headroomhq/headroom/features"
)

// ServerState is one candidate server as a router sees it when it
// dispatches a request: the server's scraped gauges, the request's prefix
// score on it, and the router's own bookkeeping.
type ServerState struct {
	Index             int
	KVCachePercentage float64 // used blocks / pool, at the last scrape
	NumRequestWaiting int     // at the last scrape
	NumRequestRunning int     // at the last scrape
	PrefixCacheScore  float64 // fraction of the request's full prompt blocks cached there, now
	// The router's own counts: requests it sent there that have not
	// finished, and their prompt tokens (less the prefix hit expected at
	// dispatch) that have not produced a first token.
	InFlight              int
	PrefillTokensInFlight int64
}

// Row is the prediction row llm-d's router builds for sending req to this
// server. num_request_running is the router's own in-flight count, as in
// llm-d since August 2026 (the trace's meaning); decode_tokens_in_flight is
// always 0 there, and stays 0 here.
func (s ServerState) Row(req *Request) features.Row {
	return features.Row{
		KVCachePercentage:     s.KVCachePercentage,
		InputTokenLength:      int64(req.PromptTokens),
		NumRequestWaiting:     int64(s.NumRequestWaiting),
		NumRequestRunning:     int64(s.InFlight),
		PrefixCacheScore:      s.PrefixCacheScore,
		PrefillTokensInFlight: s.PrefillTokensInFlight,
	}
}

// Router picks the server for a request. servers[i].Index == i. A router
// may keep state between calls (a fleet calls it from one goroutine).
type Router interface {
	Route(req *Request, servers []ServerState) int
}

// RoundRobin sends requests to servers in turn, ignoring their state.
type RoundRobin struct{ next int }

// Route implements Router.
func (r *RoundRobin) Route(_ *Request, servers []ServerState) int {
	i := r.next % len(servers)
	r.next = i + 1
	return i
}

// LeastQueue sends a request to the server with the fewest requests waiting
// and running; ties go to the one with the fewest in flight from this
// router (which counts requests the server has not seen yet), then the
// lowest index.
type LeastQueue struct{}

// Route implements Router.
func (LeastQueue) Route(_ *Request, servers []ServerState) int {
	best := 0
	for i, s := range servers[1:] {
		b := servers[best]
		q, bq := s.NumRequestWaiting+s.NumRequestRunning, b.NumRequestWaiting+b.NumRequestRunning
		if q < bq || (q == bq && s.InFlight < b.InFlight) {
			best = i + 1
		}
	}
	return best
}

// LoadPrefix is llm-d's composite fallback scorer: it sends a request to the
// server with the highest
//
//	wKV·(1 − KV) + wQueue·(maxQ − q)/maxQ + wPrefix·prefixScore
//
// with the weights normalised to sum 1, q = waiting + running and maxQ the
// largest q among the candidates (the queue term is 1 for all when every
// queue is empty). Ties go to the fewest in flight, then the lowest index.
type LoadPrefix struct {
	WKV, WQueue, WPrefix float64
}

// DefaultLoadPrefix has llm-d's chart weights, 1/1/1.
func DefaultLoadPrefix() LoadPrefix { return LoadPrefix{WKV: 1, WQueue: 1, WPrefix: 1} }

// Score is the composite score of one server, given the largest queue.
func (p LoadPrefix) Score(s ServerState, maxQ int) float64 {
	sum := p.WKV + p.WQueue + p.WPrefix
	if sum <= 0 {
		return 0
	}
	queue := 1.0
	if maxQ > 0 {
		queue = float64(maxQ-(s.NumRequestWaiting+s.NumRequestRunning)) / float64(maxQ)
	}
	return (p.WKV*(1-s.KVCachePercentage) + p.WQueue*queue + p.WPrefix*s.PrefixCacheScore) / sum
}

// Route implements Router.
func (p LoadPrefix) Route(_ *Request, servers []ServerState) int {
	maxQ := 0
	for _, s := range servers {
		maxQ = max(maxQ, s.NumRequestWaiting+s.NumRequestRunning)
	}
	best, bestScore := 0, p.Score(servers[0], maxQ)
	for i, s := range servers[1:] {
		sc := p.Score(s, maxQ)
		if sc > bestScore || (sc == bestScore && s.InFlight < servers[best].InFlight) {
			best, bestScore = i+1, sc
		}
	}
	return best
}

// RouterNames lists the names NewRouter accepts.
var RouterNames = []string{"round-robin", "least-queue", "load-prefix", "oracle-ttft"}

// NewRouter returns a fresh built-in router by name, or false.
func NewRouter(name string) (Router, bool) {
	switch name {
	case "round-robin":
		return &RoundRobin{}, true
	case "least-queue":
		return LeastQueue{}, true
	case "load-prefix":
		return DefaultLoadPrefix(), true
	case "oracle-ttft":
		return &TTFTOracle{}, true
	}
	return nil, false
}
