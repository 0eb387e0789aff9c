package simsched

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
)

// indexUpdates are the approximate prefix producers' updates in flight.
// Each producer's PreRequest adds the scheduled request's blocks to its
// index in a goroutine of its own, counted by the producer's unexported
// WaitGroup `wg` (llm-d-router's approximateprefix/plugin.go: "Update
// indexer asynchronously to avoid blocking the request path"). In the EPP
// the next request can race that update; so it could here, and whether
// the next request's lookup saw the blocks was then the wall clock's
// choice: two runs of one seed picked differently from the first lost
// race on and diverged (docs/DEMO.md, "llm-d's scheduler in the loop").
// The simulator's requests come one at a time on its own clock, so after
// each decision it waits for the updates, as if the EPP's goroutine always
// won.
//
// Invariant: every WaitGroup is an approximate prefix producer's own, and
// is waited on only after the PreRequest that may have added to it has
// returned, by the goroutine that called it (router.mu held).
type indexUpdates []*sync.WaitGroup

// prefixIndexUpdates finds the WaitGroup of every approximate prefix
// producer among plugins. A producer without one is an error: llm-d changed
// how it updates the index, and a run would no longer be repeatable.
func prefixIndexUpdates(plugins []fwkplugin.Plugin) (indexUpdates, error) {
	var out indexUpdates
	for _, p := range plugins {
		if p.TypedName().Type != approximateprefix.ApproxPrefixCachePluginType {
			continue
		}
		v := reflect.ValueOf(p)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			return nil, fmt.Errorf("%s: a %T, want a pointer to llm-d's producer struct", p.TypedName(), p)
		}
		f := v.Elem().FieldByName("wg")
		if !f.IsValid() || f.Type() != reflect.TypeFor[sync.WaitGroup]() {
			return nil, fmt.Errorf("%s: %T has no sync.WaitGroup field wg counting its index updates: "+
				"this llm-d updates its prefix index some other way, and the simulator cannot wait for it",
				p.TypedName(), p)
		}
		out = append(out, (*sync.WaitGroup)(unsafe.Pointer(f.UnsafeAddr())))
	}
	return out, nil
}

// wait returns when no update is in flight.
func (u indexUpdates) wait() {
	for _, wg := range u {
		wg.Wait()
	}
}
