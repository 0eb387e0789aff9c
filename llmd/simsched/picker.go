package simsched

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/picker"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/picker/maxscore"
)

// The loop's one substitution in llm-d's scheduling: the sim-scheduler
// serves, under the type llm-d's configs name (max-score-picker), a picker
// of its own with llm-d's semantics, the highest weighted score with ties
// broken at random, whose randomness is the run's. llm-d's picker shuffles
// the candidates with a generator seeded from the wall clock after its
// profile has listed them in a Go map's iteration order, so two runs of
// one seed broke the first tie (every pod idle, equal scores) differently
// and diverged from there (docs/DEMO.md, "llm-d's scheduler in the loop").
// Every config of the loop gets it alike; the shipped EPP keeps llm-d's.

// seededPickerParameters are max-score-picker's parameters and the seed
// the router merges in.
type seededPickerParameters struct {
	MaxNumOfEndpoints int    `json:"maxNumOfEndpoints"`
	Seed              uint64 `json:"seed"`
}

// seedParameter is the parameter the router sets on the config's pickers.
const seedParameter = "seed"

// seededPicker picks the highest-scored endpoints, ties broken by its
// generator after the candidates are put in the order of their names, so
// that the pick is a function of the scores, the names and the generator's
// state, never of the order the profile listed them in.
type seededPicker struct {
	typedName fwkplugin.TypedName
	max       int
	rand      *rand.Rand // the profiles call a router's picker one at a time
}

var _ fwksched.Picker = (*seededPicker)(nil)

// seededPickerFactory builds a seededPicker from max-score-picker's
// parameters and the seed.
func seededPickerFactory(name string, raw *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	params := seededPickerParameters{MaxNumOfEndpoints: picker.DefaultMaxNumOfEndpoints}
	if raw != nil {
		if err := raw.Decode(&params); err != nil {
			return nil, fmt.Errorf("%s %q: parameters: %w", maxscore.MaxScorePickerType, name, err)
		}
	}
	return newSeededPicker(name, params.MaxNumOfEndpoints, params.Seed), nil
}

func newSeededPicker(name string, maxEndpoints int, seed uint64) *seededPicker {
	return &seededPicker{
		typedName: fwkplugin.TypedName{Type: maxscore.MaxScorePickerType, Name: name},
		max:       max(maxEndpoints, picker.DefaultMaxNumOfEndpoints),
		// The second word only keeps the stream apart from other uses of
		// the seed.
		rand: rand.New(rand.NewPCG(seed, 0x706963)),
	}
}

// TypedName implements fwkplugin.Plugin.
func (p *seededPicker) TypedName() fwkplugin.TypedName { return p.typedName }

// Pick implements fwksched.Picker.
func (p *seededPicker) Pick(_ context.Context, scored []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	slices.SortFunc(scored, func(a, b *fwksched.ScoredEndpoint) int {
		return strings.Compare(a.GetMetadata().ID.String(), b.GetMetadata().ID.String())
	})
	p.rand.Shuffle(len(scored), func(i, j int) { scored[i], scored[j] = scored[j], scored[i] })
	slices.SortStableFunc(scored, func(a, b *fwksched.ScoredEndpoint) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	scored = scored[:min(p.max, len(scored))]
	targets := make([]fwksched.Endpoint, len(scored))
	for i, s := range scored {
		targets[i] = s
	}
	return &fwksched.ProfileRunResult{TargetEndpoints: targets}
}
