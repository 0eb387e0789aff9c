package sim

import (
	"math"
	"testing"
	"time"
)

// testCost has distinct, non-round coefficients so that a formula using the
// wrong count cannot match by accident.
var testCost = CostModel{StepMs: 10, PrefillTokenMs: 0.1, DecodeSeqMs: 0.5, ContextTokenMs: 0.001, FrontendMs: 3}

func testConfig() Config {
	return Config{Name: "test", Servers: 1, KVBlocks: 1000, PrefixCaching: true,
		MaxNumSeqs: 64, MaxNumBatchedTokens: 512, Cost: testCost}
}

// promptReq returns a request whose prompt content is identified by
// content: two requests with the same content share every full block.
func promptReq(id int, at time.Duration, prompt, output int, content uint64) *Request {
	ids := make([]uint64, prompt/BlockSize)
	for i := range ids {
		ids[i] = content<<20 | uint64(i)
	}
	return &Request{ID: id, Arrival: at, PromptTokens: prompt, OutputTokens: output, BlockHashes: ChainBlocks(ids)}
}

// runEngine delivers each request to one engine at its arrival and runs
// until idle, checking the engine's invariants after every event.
func runEngine(t *testing.T, cfg Config, reqs ...*Request) (*Engine, []*Outcome) {
	t.Helper()
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	outs := make([]*Outcome, len(reqs))
	for i, r := range reqs {
		outs[i] = &Outcome{Request: r, Dispatch: r.Arrival}
		if err := e.Submit(outs[i], r.Arrival+cfg.Cost.Frontend()); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; ; n++ {
		if _, ok := e.Next(); !ok {
			break
		}
		if n > 10_000_000 {
			t.Fatal("engine does not stop")
		}
		e.Advance()
		checkEngine(t, e)
	}
	for _, o := range outs {
		if !o.Done {
			t.Fatalf("request %d did not finish", o.Request.ID)
		}
	}
	return e, outs
}

// checkEngine asserts the scheduler's and the block pool's invariants.
func checkEngine(t *testing.T, e *Engine) {
	t.Helper()
	tokens := 0
	for _, s := range e.batch {
		tokens += s.sched
		if len(s.blocks) < blocksFor(s.computed+s.sched) {
			t.Fatalf("request %d scheduled %d tokens after %d with only %d blocks", s.req.ID, s.sched, s.computed, len(s.blocks))
		}
	}
	if tokens > e.cfg.MaxNumBatchedTokens {
		t.Fatalf("step schedules %d tokens, budget %d", tokens, e.cfg.MaxNumBatchedTokens)
	}
	if len(e.running) > e.cfg.MaxNumSeqs {
		t.Fatalf("%d running, cap %d", len(e.running), e.cfg.MaxNumSeqs)
	}
	p := e.pool
	refs := make([]int32, p.size())
	for _, s := range e.running {
		for _, b := range s.blocks {
			refs[b]++
		}
	}
	for _, s := range e.waiting {
		if len(s.blocks) != 0 {
			t.Fatalf("waiting request %d holds %d blocks", s.req.ID, len(s.blocks))
		}
	}
	onFree := make([]bool, p.size())
	n := 0
	for b := p.head; b >= 0; b = p.next[b] {
		onFree[b] = true
		n++
	}
	if n != p.free {
		t.Fatalf("free list has %d blocks, count says %d", n, p.free)
	}
	for b := range refs {
		if refs[b] != p.ref[b] {
			t.Fatalf("block %d: %d holders, refcount %d", b, refs[b], p.ref[b])
		}
		if onFree[b] != (p.ref[b] == 0) {
			t.Fatalf("block %d: on free list %v with refcount %d", b, onFree[b], p.ref[b])
		}
	}
	for h, b := range p.cached {
		if !p.hashed[b] || p.hash[b] != h {
			t.Fatalf("cache maps %x to block %d, which holds %x (hashed %v)", h, b, p.hash[b], p.hashed[b])
		}
	}
}

// closedForm is one request alone on an idle engine: the frontend delay,
// then prefill chunks of at most budget tokens (the last one samples the
// first token), then one decode step per further output token.
func closedForm(c CostModel, prompt, output, budget int) (ttft, e2e float64) {
	t := c.FrontendMs
	for done := 0; done < prompt; {
		n := min(budget, prompt-done)
		done += n
		t += c.StepMs + c.PrefillTokenMs*float64(n) + c.ContextTokenMs*float64(done)
	}
	ttft = t
	for k := 1; k < output; k++ {
		t += c.StepMs + c.DecodeSeqMs + c.ContextTokenMs*float64(prompt+k)
	}
	return ttft, t
}

func TestEngineSingleRequestMatchesClosedForm(t *testing.T) {
	tests := []struct {
		name                   string
		prompt, output, budget int
	}{
		{"one token out", 100, 1, 512},
		{"short", 100, 5, 512},
		{"prompt fills budget", 512, 3, 512},
		{"chunked prefill", 1300, 20, 512},
		{"tiny budget", 40, 4, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxNumBatchedTokens = tt.budget
			_, outs := runEngine(t, cfg, promptReq(1, 0, tt.prompt, tt.output, 1))
			wantTTFT, wantE2E := closedForm(cfg.Cost, tt.prompt, tt.output, tt.budget)
			steps := float64(1 + tt.output + tt.prompt/tt.budget) // each step rounds to 1 ns at most
			if got := durationMs(outs[0].TTFT()); math.Abs(got-wantTTFT) > steps*1e-6 {
				t.Errorf("TTFT %.6f ms, closed form %.6f", got, wantTTFT)
			}
			if got := durationMs(outs[0].E2E()); math.Abs(got-wantE2E) > steps*1e-6 {
				t.Errorf("E2E %.6f ms, closed form %.6f", got, wantE2E)
			}
			if tt.output > 1 {
				wantTPOT := (wantE2E - wantTTFT) / float64(tt.output-1)
				if got := durationMs(outs[0].TPOT()); math.Abs(got-wantTPOT) > 1e-3 {
					t.Errorf("TPOT %.6f ms, closed form %.6f", got, wantTPOT)
				}
			}
		})
	}
}

func TestEngineReusesCachedPrefix(t *testing.T) {
	const prompt, output = 160, 4
	for _, caching := range []bool{true, false} {
		cfg := testConfig()
		cfg.PrefixCaching = caching
		first := promptReq(1, 0, prompt, output, 7)
		// The second request arrives long after the first has finished.
		second := promptReq(2, 10*time.Second, prompt, output, 7)
		_, outs := runEngine(t, cfg, first, second)
		if outs[0].PrefixHitTokens != 0 {
			t.Errorf("caching=%v: cold request has %d hit tokens", caching, outs[0].PrefixHitTokens)
		}
		// The last prompt token is always recomputed, so the hit stops at the
		// last full block before it: (160-1)/16 = 9 blocks.
		wantHit := 0
		if caching {
			wantHit = (prompt - 1) / BlockSize * BlockSize
		}
		if outs[1].PrefixHitTokens != wantHit {
			t.Errorf("caching=%v: warm request has %d hit tokens, want %d", caching, outs[1].PrefixHitTokens, wantHit)
		}
		// Hit tokens skip prefill compute but are still attended.
		saved := cfg.Cost.PrefillTokenMs * float64(wantHit)
		got := durationMs(outs[0].TTFT() - outs[1].TTFT())
		if math.Abs(got-saved) > 1e-5 {
			t.Errorf("caching=%v: TTFT drops by %.6f ms, want %.6f", caching, got, saved)
		}
	}
}

func TestEngineFullyCachedPromptStillComputesOneToken(t *testing.T) {
	cfg := testConfig()
	// 64 tokens: 4 full blocks, but at most 3 can hit.
	_, outs := runEngine(t, cfg, promptReq(1, 0, 64, 2, 3), promptReq(2, time.Second, 64, 2, 3))
	if got := outs[1].PrefixHitTokens; got != 48 {
		t.Fatalf("hit tokens %d, want 48", got)
	}
}

func TestPrefixCacheEvictsLeastRecentlyUsed(t *testing.T) {
	// A pool of 8 blocks holds exactly two 64-token prompts (4 blocks each,
	// one output token so nothing else is needed).
	a := func(id int, at time.Duration) *Request { return promptReq(id, at, 64, 1, 0xA) }
	b := func(id int, at time.Duration) *Request { return promptReq(id, at, 64, 1, 0xB) }
	d := func(id int, at time.Duration, prompt int) *Request { return promptReq(id, at, prompt, 1, 0xD) }
	s := time.Second
	tests := []struct {
		name         string
		reqs         []*Request
		wantA, wantB float64 // prefix scores afterwards
		wantEvicted  int
	}{
		{"oldest prompt goes", []*Request{a(1, 0), b(2, s), d(3, 2*s, 64)}, 0, 1, 4},
		{"a hit refreshes it", []*Request{a(1, 0), b(2, s), a(3, 2*s), d(4, 3*s, 64)}, 1, 0, 5},
		// Half a prompt's worth of new blocks evicts the older prompt's tail
		// first, so its head still matches.
		{"tail evicted first", []*Request{a(1, 0), b(2, s), d(3, 2*s, 32)}, 0.5, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.KVBlocks = 8
			e, _ := runEngine(t, cfg, tt.reqs...)
			if got := e.PrefixCacheScore(a(90, 0)); got != tt.wantA {
				t.Errorf("prompt A score %v, want %v", got, tt.wantA)
			}
			if got := e.PrefixCacheScore(b(91, 0)); got != tt.wantB {
				t.Errorf("prompt B score %v, want %v", got, tt.wantB)
			}
			if got := e.Stats().Evictions; got != tt.wantEvicted {
				t.Errorf("%d evictions, want %d", got, tt.wantEvicted)
			}
		})
	}
}

func TestEnginePreemptsNewestWhenPoolIsShort(t *testing.T) {
	// Four requests of 64 prompt + 40 output tokens need 7 blocks each at
	// the end, 28 in all; the pool has 20. Each fits alone.
	cfg := testConfig()
	cfg.KVBlocks = 20
	var reqs []*Request
	for i := 1; i <= 4; i++ {
		reqs = append(reqs, promptReq(i, 0, 64, 40, uint64(i)))
	}
	e, outs := runEngine(t, cfg, reqs...)
	if e.Stats().Preemptions == 0 {
		t.Fatal("no preemption although the pool cannot hold all four")
	}
	if outs[0].Preemptions != 0 {
		t.Errorf("the oldest request was preempted %d times; the newest should go first", outs[0].Preemptions)
	}
	if outs[3].Preemptions == 0 {
		t.Errorf("the newest request was never preempted")
	}
	// With room for all, the same requests are never preempted and finish
	// no later.
	cfg.KVBlocks = 28
	roomy, roomyOuts := runEngine(t, cfg, reqs...)
	if roomy.Stats().Preemptions != 0 {
		t.Errorf("%d preemptions with room for everything", roomy.Stats().Preemptions)
	}
	if roomyOuts[3].Finish > outs[3].Finish {
		t.Errorf("more room finished later: %v > %v", roomyOuts[3].Finish, outs[3].Finish)
	}
}

func TestEngineChunksWithinBudgetAndCap(t *testing.T) {
	cfg := testConfig()
	cfg.MaxNumBatchedTokens = 100
	cfg.MaxNumSeqs = 3
	var reqs []*Request
	for i := 1; i <= 12; i++ {
		reqs = append(reqs, promptReq(i, time.Duration(i)*time.Millisecond, 90+37*i, 8+i, uint64(i)))
	}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	outs := make([]*Outcome, len(reqs))
	for i, r := range reqs {
		outs[i] = &Outcome{Request: r, Dispatch: r.Arrival}
		if err := e.Submit(outs[i], r.Arrival); err != nil {
			t.Fatal(err)
		}
	}
	maxRunning, maxTokens, chunked := 0, 0, false
	for {
		if _, ok := e.Next(); !ok {
			break
		}
		e.Advance()
		checkEngine(t, e)
		tokens := 0
		for _, s := range e.batch {
			tokens += s.sched
			if s.sched < s.numTokens()-s.computed {
				chunked = true
			}
		}
		maxRunning, maxTokens = max(maxRunning, len(e.running)), max(maxTokens, tokens)
	}
	if maxRunning != cfg.MaxNumSeqs {
		t.Errorf("at most %d running, want the cap %d reached", maxRunning, cfg.MaxNumSeqs)
	}
	if maxTokens != cfg.MaxNumBatchedTokens {
		t.Errorf("largest step %d tokens, want the budget %d reached", maxTokens, cfg.MaxNumBatchedTokens)
	}
	if !chunked {
		t.Error("no prompt was split although every prompt exceeds the budget")
	}
	for _, o := range outs {
		if !o.Done {
			t.Errorf("request %d did not finish", o.Request.ID)
		}
	}
}

func TestEngineDecodesBeforePrefill(t *testing.T) {
	// A long prompt arrives while a short request decodes: every step keeps
	// the decoder's token and fills the rest of the budget with prefill, so
	// the decoder's TPOT is the decode step plus a full chunk, never a stall.
	cfg := testConfig()
	cfg.MaxNumBatchedTokens = 64
	cfg.Cost.FrontendMs = 0
	short := promptReq(1, 0, 16, 30, 1)
	long := promptReq(2, 30*time.Millisecond, 64*10, 2, 2)
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Request{short, long} {
		if err := e.Submit(&Outcome{Request: r, Dispatch: r.Arrival}, r.Arrival); err != nil {
			t.Fatal(err)
		}
	}
	sawMixed := false
	for {
		if _, ok := e.Next(); !ok {
			break
		}
		e.Advance()
		var decode, prefill, remaining int
		for _, s := range e.batch {
			if s.decoding() {
				decode += s.sched
			} else {
				prefill += s.sched
				remaining += s.numTokens() - s.computed
			}
		}
		if decode > 0 && prefill > 0 {
			sawMixed = true
			if want := min(remaining, cfg.MaxNumBatchedTokens-decode); prefill != want {
				t.Fatalf("mixed step: %d decode + %d prefill tokens, want %d prefill", decode, prefill, want)
			}
		}
	}
	if !sawMixed {
		t.Fatal("no step mixed decode and prefill")
	}
}

func TestEngineRefusesRequestLargerThanCache(t *testing.T) {
	cfg := testConfig()
	cfg.KVBlocks = 4
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 64 + 2 - 1 = 65 tokens need 5 blocks.
	r := promptReq(1, 0, 64, 2, 1)
	if e.Fits(r) {
		t.Fatal("Fits accepts a request that needs 5 of 4 blocks")
	}
	if err := e.Submit(&Outcome{Request: r}, 0); err == nil {
		t.Fatal("Submit accepted it")
	}
	if !e.Fits(promptReq(2, 0, 64, 1, 1)) {
		t.Fatal("Fits refuses a request that needs exactly the pool")
	}
}
