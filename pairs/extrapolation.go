package pairs

import "github.com/headroomhq/headroom/model"

// A prediction for a row that lies beyond the load the model was trained
// on is the one a router must not trust. Along a column latency grows with
// (requests waiting and running, tokens in flight, the prompt's uncached
// work), a row above the training maximum is where the truth keeps rising
// and the model cannot follow: trees repeat their last leaf, and a line
// fitted on a balanced fleet weighs the queue too little. A router that
// trusts such a prediction sends the pod more requests, deepening the queue
// the model cannot see, and the labels that would correct it arrive only
// when those requests end (docs/DEMO.md, P/D, "Beyond the model's experience").
//
// Below the training minimum, or beyond the range of a column latency
// falls with (the cached share), the model errs towards predicting too
// much, which costs a router a good choice but never piles requests on an
// overloaded pod; those are not flagged.

// extrapolated reports whether feature vector x of target model m lies
// above m's training maximum on a column along which latency cannot fall.
func extrapolated(m *model.TargetModel, x []float64) bool {
	schema := m.Schema()
	for i, r := range m.Ranges {
		if x[i] > r.Max && schema.Direction(i) > 0 {
			return true
		}
	}
	return false
}
