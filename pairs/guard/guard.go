// Package guard is the rule by which a router takes a route from a ranking
// some of whose options are extrapolated (docs/PROTOCOL.md §4.7,
// "Extrapolated"): Headroom's own joint router (lab/sim's PairRule) and
// the llm-d plugins (llmd/plugins) both decide by it.
//
// An extrapolated option's estimate rests on a pod loaded beyond what the
// model was trained on, where the truth keeps rising and the model cannot
// follow: the estimate is likely low, never likely high. So an
// extrapolated option whose estimate already ranks below the best trusted
// option cannot be the better route, and the trusted option is taken on
// an estimate the model can vouch for. Only when an extrapolated option
// could win (it ranks at or above the best trusted option), or when every
// option is extrapolated, does the router fall back to its own policy.
// The comparison is against the trusted option's estimate, not its upper
// bound: the extrapolated estimate's bias is already the margin, and each
// fallback hands the request to a policy that cannot see the load the
// model sees; against the 95% bound, llm-d's loop fell back more often
// and had the longer tail on every run measured (docs/DEMO.md,
// "llm-d's scheduler in the loop", "The guard against the trusted
// option's upper bound").
//
// The package has no dependencies, so that the llm-d plugins' module can
// import it without the rest of Headroom's.
package guard

import "errors"

var (
	// ErrNoOption: no option was offered.
	ErrNoOption = errors.New("no option to route on")
	// ErrExtrapolated: an extrapolated option ranks at or above the best
	// trusted option, or every option is extrapolated.
	ErrExtrapolated = errors.New("an extrapolated option could be the better route")
)

// Choice is the best route among the options offered to it, under the
// guard. Better must be set; the zero value otherwise holds no option.
//
// Invariant: trusted (extrapolated) is the first best of the trusted
// (extrapolated) options offered, valid when haveTrusted (haveExtrapolated).
type Choice[O any] struct {
	// Better reports whether route a is strictly better than route b.
	Better func(a, b O) bool
	// Trust treats every option as trusted: the router routes on
	// extrapolated estimates too.
	Trust bool

	trusted, extrapolated         O
	haveTrusted, haveExtrapolated bool
}

// Offer adds an option the router chooses among; extrapolated says whether
// its estimate is.
func (c *Choice[O]) Offer(o O, extrapolated bool) {
	if extrapolated && !c.Trust {
		if !c.haveExtrapolated || c.Better(o, c.extrapolated) {
			c.extrapolated, c.haveExtrapolated = o, true
		}
		return
	}
	if !c.haveTrusted || c.Better(o, c.trusted) {
		c.trusted, c.haveTrusted = o, true
	}
}

// Best returns the best trusted option, first among equals; ErrNoOption
// when none was offered, ErrExtrapolated when an extrapolated option is
// not strictly worse than it (a tie could go either way) or every option
// is extrapolated.
func (c *Choice[O]) Best() (O, error) {
	var none O
	switch {
	case !c.haveTrusted && !c.haveExtrapolated:
		return none, ErrNoOption
	case !c.haveTrusted, c.haveExtrapolated && !c.Better(c.trusted, c.extrapolated):
		return none, ErrExtrapolated
	}
	return c.trusted, nil
}
