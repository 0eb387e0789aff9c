package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

// logLine is one request in a JSONL request log. The content of the prompt
// is given either as token ids (prompt_tokens, optionally followed by the
// answer's output_tokens, so that a later prompt containing the answer can
// hit the cache) or as content ids of its 16-token blocks (blocks, which may
// continue into the answer) together with prompt_len.
//
// A vLLM benchmark harness's per-request log (LLMServingSim's
// requests.jsonl: request_id, input_toks, output_toks, arrival_time in
// epoch seconds, and the engine's timestamps, which a replay ignores) reads
// as the same: arrivals from the first request's, prompts of unknown
// content.
type logLine struct {
	ID       int      `json:"id"`
	ArrivalS *float64 `json:"arrival_s"`
	// The benchmark harness's fields.
	RequestID   string   `json:"request_id"`
	InputToks   int      `json:"input_toks"`
	OutputToks  int      `json:"output_toks"`
	ArrivalTime *float64 `json:"arrival_time"`
	QueuedTS    *float64 `json:"queued_ts"`
	ScheduledTS *float64 `json:"scheduled_ts"`
	FirstTS     *float64 `json:"first_token_ts"`
	LastTS      *float64 `json:"last_token_ts"`

	After        int      `json:"after"`
	ThinkS       float64  `json:"think_s"`
	PromptTokens []int32  `json:"prompt_tokens"`
	OutputTokens []int32  `json:"output_tokens"`
	Blocks       []uint64 `json:"blocks"`
	PromptLen    int      `json:"prompt_len"`
	OutputLen    int      `json:"output_len"`
}

// ReadLogFile reads a request log from a file.
func ReadLogFile(path string) ([]*sim.Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open request log: %w", err)
	}
	defer f.Close()
	reqs, err := ReadLog(f)
	if err != nil {
		return nil, fmt.Errorf("request log %s: %w", path, err)
	}
	return reqs, nil
}

// ReadLog reads a JSONL request log (format in docs/SIMULATOR.md). Blank
// lines and lines starting with # are skipped; a request without an id gets
// its 1-based position among the requests. Unknown fields are errors.
func ReadLog(r io.Reader) ([]*sim.Request, error) {
	var reqs []*sim.Request
	seen := make(map[int]int)       // id → line
	epoch, epochs := math.Inf(1), 0 // the first absolute arrival_time, and how many lines give one
	err := ScanJSONL(r, func(line int, text []byte) error {
		var l logLine
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if l.ID == 0 {
			l.ID = len(reqs) + 1
		}
		if l.ArrivalTime != nil {
			epoch, epochs = min(epoch, *l.ArrivalTime), epochs+1
			rel := *l.ArrivalTime
			l.ArrivalS = &rel // made relative below
			l.PromptLen, l.OutputLen = l.InputToks, l.OutputToks
		}
		req, err := l.request()
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if prev, dup := seen[req.ID]; dup {
			return fmt.Errorf("line %d: id %d already used on line %d", line, req.ID, prev)
		}
		seen[req.ID] = line
		reqs = append(reqs, req)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if epochs > 0 {
		if epochs != len(reqs) {
			return nil, fmt.Errorf("%d of %d requests give an absolute arrival_time: all or none must", epochs, len(reqs))
		}
		for _, r := range reqs {
			r.Arrival -= seconds(epoch)
		}
	}
	for _, r := range reqs {
		if _, ok := seen[r.After]; r.After != 0 && !ok {
			return nil, fmt.Errorf("line %d: after %d names no request in the log", seen[r.ID], r.After)
		}
	}
	return reqs, nil
}

// ScanJSONL calls each with every line of a JSONL file that is not blank
// and not a comment (#), trimmed, and its 1-based number, until each
// returns an error; a line may be up to 64 MiB. The request log and an
// engine's per-request log (lab/fidelity) are read through it.
func ScanJSONL(r io.Reader, each func(line int, text []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		if err := each(line, text); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

func (l *logLine) request() (*sim.Request, error) {
	if l.ArrivalS == nil {
		return nil, fmt.Errorf("arrival_s is missing")
	}
	if *l.ArrivalS < 0 || math.IsNaN(*l.ArrivalS) || l.ThinkS < 0 {
		return nil, fmt.Errorf("arrival_s %v and think_s %v must be >= 0", *l.ArrivalS, l.ThinkS)
	}
	r := &sim.Request{
		ID:      l.ID,
		Arrival: seconds(*l.ArrivalS),
		After:   l.After,
		Think:   seconds(l.ThinkS),
	}
	switch {
	case len(l.PromptTokens) > 0 && len(l.Blocks) > 0:
		return nil, fmt.Errorf("give prompt_tokens or blocks, not both")
	case len(l.PromptTokens) > 0:
		if l.PromptLen != 0 && l.PromptLen != len(l.PromptTokens) {
			return nil, fmt.Errorf("prompt_len %d but %d prompt_tokens", l.PromptLen, len(l.PromptTokens))
		}
		if len(l.OutputTokens) > 0 && l.OutputLen != 0 && l.OutputLen != len(l.OutputTokens) {
			return nil, fmt.Errorf("output_len %d but %d output_tokens", l.OutputLen, len(l.OutputTokens))
		}
		r.PromptTokens = len(l.PromptTokens)
		r.OutputTokens = l.OutputLen
		if r.OutputTokens == 0 {
			r.OutputTokens = len(l.OutputTokens)
		}
		seq := append(append(make([]int32, 0, len(l.PromptTokens)+len(l.OutputTokens)), l.PromptTokens...), l.OutputTokens...)
		r.BlockHashes = sim.HashTokens(seq)
	case len(l.OutputTokens) > 0:
		return nil, fmt.Errorf("output_tokens needs prompt_tokens")
	default:
		if l.PromptLen < 1 {
			return nil, fmt.Errorf("need prompt_tokens, or prompt_len (with optional blocks)")
		}
		r.PromptTokens = l.PromptLen
		r.OutputTokens = l.OutputLen
		r.BlockHashes = sim.ChainBlocks(l.Blocks)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// Rescale returns copies of reqs with arrival times scaled so that the
// requests that do not wait for another arrive at rate per second on
// average; think times are kept. rate 0 returns reqs unchanged.
func Rescale(reqs []*sim.Request, rate float64) ([]*sim.Request, error) {
	if rate == 0 {
		return reqs, nil
	}
	if rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("rescale to rate %v: need a positive rate", rate)
	}
	var first, last time.Duration
	n := 0
	for _, r := range reqs {
		if r.After != 0 {
			continue
		}
		if n == 0 || r.Arrival < first {
			first = r.Arrival
		}
		last = max(last, r.Arrival)
		n++
	}
	if n < 2 || last == first {
		return nil, fmt.Errorf("rescale to rate %v: the log needs two independent requests at different times", rate)
	}
	factor := float64(n-1) / rate / (last - first).Seconds()
	out := make([]*sim.Request, len(reqs))
	for i, r := range reqs {
		c := *r
		c.Arrival = max(0, first+time.Duration(math.Round(float64(r.Arrival-first)*factor)))
		out[i] = &c
	}
	return out, nil
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
