package bundle

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// Published is a bundle together with its exact serialised bytes, which is
// what a trainer serves and a predictor verifies. Immutable.
type Published struct {
	Bundle  *model.Bundle
	Encoded []byte

	dumps [features.NumTargets]struct { // by target: the per-pod ones have trees
		once sync.Once
		data []byte
		err  error
	}
}

// Target is the bundle's model for t; nil when p is nil or t has none.
func (p *Published) Target(t features.Target) *model.TargetModel {
	if p == nil {
		return nil
	}
	return p.Bundle.Target(t)
}

// TransferStatus is the bundle's transfer model's status; not ready when
// p is nil or the bundle has no transfer model.
func (p *Published) TransferStatus() model.TransferStatus { return p.LawStatus(features.KVTransfer) }

// LawStatus is the status of the bundle's per-pair model of t (KVTransfer
// or SplitTTFT); not ready when p is nil or the bundle has none.
func (p *Published) LawStatus(t features.Target) model.TransferStatus {
	if p == nil {
		return model.TransferStatus{}
	}
	return p.Bundle.Law(t).Status()
}

// TreeDump is t's trees in XGBoost's JSON dump format, with the model's
// column names. It is computed once per bundle: the router fetches it every
// minute, and the reference re-dumped 200 trees on every call.
func (p *Published) TreeDump(t features.Target) ([]byte, error) {
	m := p.Target(t)
	if m == nil || m.Trees == nil {
		return nil, fmt.Errorf("%s has no trees", t)
	}
	d := &p.dumps[t]
	d.once.Do(func() { d.data, d.err = json.Marshal(m.Trees.Dump(m.Columns)) })
	return d.data, d.err
}

// ETag is the HTTP entity tag of the bundle: its checksum, quoted.
func (p *Published) ETag() string { return `"` + p.Bundle.Checksum + `"` }
