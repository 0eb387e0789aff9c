package wire

import (
	"math"
	"strconv"
	"time"
)

// MaxBundleWait bounds GET /model/bundle?wait=: the answer must be written
// within the trainer's write timeout (60 s), and a proxy between predictor
// and trainer may drop a request idle for longer.
const MaxBundleWait = 50 * time.Second

// DecodeBundleWait reads the ?wait= of GET /model/bundle: empty means 0
// (answer at once); otherwise a Go duration ("30s", "250ms") or a number of
// seconds ("30", "0.5"), at least 0, capped at MaxBundleWait. A refused
// value is one error at ["query", "wait"].
func DecodeBundleWait(raw string) (time.Duration, []FieldError) {
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		secs, ferr := strconv.ParseFloat(raw, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return 0, []FieldError{{Type: "duration_parsing", Loc: []any{"query", "wait"},
				Msg: "Input should be a duration such as 30s, or a number of seconds", Input: raw}}
		}
		d = time.Duration(math.Min(secs, MaxBundleWait.Seconds()) * float64(time.Second))
	}
	if d < 0 {
		return 0, []FieldError{{Type: "greater_than_equal", Loc: []any{"query", "wait"},
			Msg: "Input should be greater than or equal to 0", Input: raw, Ctx: map[string]any{"ge": 0}}}
	}
	return min(d, MaxBundleWait), nil
}

// DecodeAcceptOlder reads the ?accept_older= of POST /reload: empty means
// false; otherwise what strconv.ParseBool takes (true, false, 1, 0, t, f in
// either case). A refused value is one error at ["query", "accept_older"].
func DecodeAcceptOlder(raw string) (bool, []FieldError) {
	if raw == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(raw)
	if err != nil {
		return false, []FieldError{{Type: "bool_parsing", Loc: []any{"query", "accept_older"},
			Msg: "Input should be a valid boolean, unable to interpret input", Input: raw}}
	}
	return v, nil
}
