package guard

import (
	"errors"
	"testing"
)

type offer struct {
	ms           float64
	extrapolated bool
}

func TestChoice(t *testing.T) {
	for _, tt := range []struct {
		name   string
		offers []offer
		trust  bool
		best   int // index into offers; -1 with an error
		err    error
	}{
		{"nothing offered", nil, false, -1, ErrNoOption},
		{"trusted only: the least", []offer{{300, false}, {200, false}, {250, false}}, false, 1, nil},
		{"equal trusted: the first", []offer{{200, false}, {200, false}}, false, 0, nil},
		{"an extrapolated option worse than the best trusted: the trusted", []offer{{300, true}, {200, false}, {250, false}}, false, 1, nil},
		{"an extrapolated option better than the best trusted: fall back", []offer{{200, false}, {150, true}}, false, -1, ErrExtrapolated},
		{"an extrapolated option tied with the best trusted: fall back", []offer{{200, false}, {200, true}}, false, -1, ErrExtrapolated},
		{"every option extrapolated: fall back", []offer{{200, true}, {300, true}}, false, -1, ErrExtrapolated},
		{"the best extrapolated option decides, not the first", []offer{{900, true}, {200, false}, {100, true}}, false, -1, ErrExtrapolated},
		{"trusting: the least of all", []offer{{200, false}, {150, true}}, true, 1, nil},
		{"trusting, every option extrapolated: the least", []offer{{200, true}, {100, true}}, true, 1, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Choice[int]{Trust: tt.trust, Better: func(a, b int) bool { return tt.offers[a].ms < tt.offers[b].ms }}
			for i, o := range tt.offers {
				c.Offer(i, o.extrapolated)
			}
			best, err := c.Best()
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
			if err == nil && best != tt.best {
				t.Errorf("best %d, want %d", best, tt.best)
			}
		})
	}
}
