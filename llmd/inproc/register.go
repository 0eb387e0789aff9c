package inproc

import (
	"sync"

	"github.com/llm-d/llm-d-router/pkg/epp/flowcontrol/registry"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	attrconcurrency "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/concurrency"
	attrprefix "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	attrtopology "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/topology"
	extractormetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	exttopology "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/extractor/topology"
	sourcemetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/source/metrics"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/flowcontrol/fairness/globalstrict"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/flowcontrol/ordering/fcfs"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/flowcontrol/usagelimits"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requesthandling/parsers/anthropic"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requesthandling/parsers/openai"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requesthandling/parsers/passthrough"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requesthandling/parsers/vllmhttp"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/filter/bylabel"
	topologyfilter "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/filter/topologyaffinity"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/picker/maxscore"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/profilehandler/disagg"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/profilehandler/single"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/scorer/activerequest"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/scorer/prefix"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/scorer/queuedepth"
	topologyscorer "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/scorer/topologyaffinity"

	"github.com/headroomhq/headroom/llmd/plugins"
)

var registerOnce sync.Once

// register adds to llm-d's plugin registry what a P/D config names (the
// plugins of llm-d's sample P/D configs and Headroom's) and what llm-d's
// loader adds on its own (a profile handler, a picker, the flow-control
// policies, the saturation detector, the request parsers, and the default
// producers of the prompt's tokens, its prefix-cache match and the
// in-flight load, the metrics data source and extractor whose keys the
// scorers consume), as llm-d's own configuration tests register theirs.
// The EPP's runner registers every in-tree plugin itself, unexported. The
// data layer is built but never started: here the caller gives each
// endpoint its metrics and attributes.
func register() {
	registerOnce.Do(func() {
		plugins.Register()
		for _, p := range []struct {
			name    string
			factory fwkplugin.FactoryFunc
		}{
			{prefix.PrefixCacheScorerPluginType, prefix.PrefixCachePluginFactory},
			{queuedepth.QueueScorerType, queuedepth.QueueScorerFactory},
			{activerequest.ActiveRequestType, activerequest.Factory},
			{bylabel.PrefillRoleType, bylabel.PrefillRoleFactory},
			{bylabel.DecodeRoleType, bylabel.DecodeRoleFactory},
			{maxscore.MaxScorePickerType, maxscore.MaxScorePickerFactory},
			{attrtopology.TopologyExtractorType, exttopology.Factory},
			{topologyfilter.FilterType, topologyfilter.Factory},
			{topologyscorer.ScorerType, topologyscorer.Factory},
			{disagg.PrefixBasedPDDeciderPluginType, disagg.PrefixBasedPDDeciderPluginFactory},
			{disagg.AlwaysDisaggPDDeciderPluginType, disagg.AlwaysDisaggPDDeciderPluginFactory},
			{single.SingleProfileHandlerType, single.SingleProfileHandlerFactory},
			{registry.DefaultOrderingPolicyRef, fcfs.FCFSOrderingPolicyFactory},
			{registry.DefaultFairnessPolicyRef, globalstrict.GlobalStrictFairnessPolicyFactory},
			{registry.DefaultUsageLimitPolicyRef, usagelimits.StaticPolicyFactory},
			{utilization.UtilizationDetectorType, utilization.UtilizationDetectorFactory},
			{openai.OpenAIParserType, openai.OpenAIParserPluginFactory},
			{anthropic.AnthropicParserType, anthropic.AnthropicParserPluginFactory},
			{vllmhttp.VllmHTTPParserType, vllmhttp.VllmHTTPParserPluginFactory},
			{passthrough.PassthroughParserType, passthrough.PassthroughParserPluginFactory},
			{sourcemetrics.MetricsDataSourceType, sourcemetrics.MetricsDataSourceFactory},
			{extractormetrics.MetricsExtractorType, extractormetrics.CoreMetricsExtractorFactory},
		} {
			fwkplugin.Register(p.name, fwkplugin.StabilityBeta, p.factory)
		}
		fwkplugin.RegisterWithPluginDependencies(disagg.DisaggProfileHandlerType, fwkplugin.StabilityBeta, disagg.HandlerFactory, disagg.DisaggProfileHandlerConfigParser)
		fwkplugin.RegisterAsDefaultProducer(approximateprefix.ApproxPrefixCachePluginType, fwkplugin.StabilityBeta, approximateprefix.ApproxPrefixCacheFactory, attrprefix.PrefixCacheMatchInfoDataKey)
		fwkplugin.RegisterAsDefaultProducer(inflightload.InFlightLoadProducerType, fwkplugin.StabilityBeta, inflightload.InFlightLoadProducerFactory, attrconcurrency.InFlightLoadDataKey)
		fwkplugin.RegisterAsDefaultProducer(tokenizer.PluginType, fwkplugin.StabilityBeta, tokenizer.PluginFactory, tokenizer.TokenizedPromptDataKey)
	})
}

// Substitute registers factory under pluginType, in place of what this
// package registers there, for every router New makes after it in this
// process: a harness's own plugin where llm-d's would make its runs differ
// (the sim-scheduler's seeded picker). llm-d's registry is the process's,
// so a caller substitutes once, before its first router.
func Substitute(pluginType string, factory fwkplugin.FactoryFunc) {
	register()
	fwkplugin.Register(pluginType, fwkplugin.StabilityBeta, factory)
}
