package simsched

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/picker/maxscore"

	"github.com/headroomhq/headroom/llmd/inproc"
)

// Both shipped configs hold an approximate prefix producer whose index
// updates the router can wait for.
func TestEveryConfigsPrefixIndexUpdatesAreWaitedFor(t *testing.T) {
	for _, c := range []struct {
		name, path string
		producer   map[string]any
	}{
		{"llm-d", stockConfig, nil},
		{"headroom", headroomConfig, map[string]any{"predictorURL": "http://127.0.0.1:1"}},
	} {
		config, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		name := c.name
		rt := newTestRouter(t, config, c.producer)
		if len(rt.indexUpdates) == 0 {
			t.Errorf("%s: no approximate prefix producer's updates found to wait for", name)
		}
		rt.close()
	}
}

// A decision's blocks are in llm-d's prefix index when the router answers.
// On one processor the producer's update goroutine would not have run by
// then unless the router waited for it: nothing blocks between the
// decision and the look at the index.
func TestADecisionsBlocksAreIndexedWhenItIsAnswered(t *testing.T) {
	config, err := os.ReadFile(stockConfig)
	if err != nil {
		t.Fatal(err)
	}
	rt := newTestRouter(t, config, nil)
	defer rt.close()
	var index interface {
		DumpState() (json.RawMessage, error)
	}
	for _, p := range rt.sched.Plugins() {
		if p.TypedName().Type == approximateprefix.ApproxPrefixCachePluginType {
			index, _ = p.(interface {
				DumpState() (json.RawMessage, error)
			})
		}
	}
	if index == nil {
		t.Fatal("the stock config has no approximate prefix producer that dumps its state")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for i, id := range []string{"a", "b", "c"} {
		if _, err := rt.schedule(&ScheduleRequest{NowNs: at(time.Duration(i) * time.Second), Request: request(id, 264),
			Endpoints: fleet()}); err != nil {
			t.Fatal(err)
		}
		raw, err := index.DumpState()
		if err != nil {
			t.Fatal(err)
		}
		var state struct {
			Pods []struct{ Blocks int }
		}
		if err := json.Unmarshal(raw, &state); err != nil {
			t.Fatal(err)
		}
		var blocks int
		for _, p := range state.Pods {
			blocks += p.Blocks
		}
		if blocks == 0 {
			t.Fatalf("request %s answered with no blocks in the prefix index: %s", id, raw)
		}
	}
}

// newTestRouter loads config as the server does, seeded pickers and all.
func newTestRouter(t *testing.T, config []byte, producer map[string]any) *router {
	t.Helper()
	inproc.Substitute(maxscore.MaxScorePickerType, seededPickerFactory)
	rt, err := newRouter(context.Background(), config, producer, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// fakePrefixProducer claims the approximate prefix producer's type but
// counts no updates.
type fakePrefixProducer struct{}

func (fakePrefixProducer) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: approximateprefix.ApproxPrefixCachePluginType, Name: "fake"}
}

func TestAPrefixProducerWhoseUpdatesCannotBeWaitedForIsRefused(t *testing.T) {
	for _, p := range []fwkplugin.Plugin{fakePrefixProducer{}, &fakePrefixProducer{}} {
		_, err := prefixIndexUpdates([]fwkplugin.Plugin{p})
		if err == nil || !strings.Contains(err.Error(), "fake") {
			t.Errorf("%T: error %v, want one naming the plugin", p, err)
		}
	}
}
