package xgboost

import (
	"math"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/model"
)

func TestParamsValidate(t *testing.T) {
	if err := DefaultParams().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Params)
		want   string // "" means valid
	}{
		{"zero rounds", func(p *Params) { p.Rounds = 0 }, "rounds"},
		{"zero depth", func(p *Params) { p.MaxDepth = 0 }, "max depth"},
		{"too deep", func(p *Params) { p.MaxDepth = model.MaxTreeDepth + 1 }, "max depth"},
		{"deepest", func(p *Params) { p.MaxDepth = model.MaxTreeDepth }, ""},
		{"eta zero", func(p *Params) { p.Eta = 0 }, "eta"},
		{"eta one", func(p *Params) { p.Eta = 1 }, ""},
		{"eta above one", func(p *Params) { p.Eta = 1.5 }, "eta"},
		{"eta NaN", func(p *Params) { p.Eta = math.NaN() }, "eta"},
		{"subsample zero", func(p *Params) { p.Subsample = 0 }, "subsample"},
		{"colsample above one", func(p *Params) { p.ColsampleBytree = 1.01 }, "colsample_bytree"},
		{"negative min child weight", func(p *Params) { p.MinChildWeight = -1 }, "min_child_weight"},
		{"negative gamma", func(p *Params) { p.Gamma = -0.1 }, "gamma"},
		{"zero gamma", func(p *Params) { p.Gamma = 0 }, ""},
		{"infinite lambda", func(p *Params) { p.Lambda = math.Inf(1) }, "lambda"},
		{"negative alpha", func(p *Params) { p.Alpha = -1 }, "alpha"},
		{"negative seed", func(p *Params) { p.Seed = -5 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			tc.change(&p)
			err := p.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid params refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
