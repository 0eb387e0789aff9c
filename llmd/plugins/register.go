package plugins

import fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

// Register adds the Headroom plugins to llm-d's plugin registry, as Alpha
// plugins (the EPP needs --allow-experimental-plugins, as for the
// topology plugins they stand in for). Call it before the runner parses
// its configuration.
func Register() {
	fwkplugin.Register(ProducerType, fwkplugin.StabilityAlpha, ProducerFactory)
	fwkplugin.RegisterWithPluginDependencies(DecodeScorerType, fwkplugin.StabilityAlpha, DecodeScorerFactory, ReaderParser)
	fwkplugin.RegisterWithPluginDependencies(PrefillScorerType, fwkplugin.StabilityAlpha, PrefillScorerFactory, ReaderParser)
	fwkplugin.RegisterWithPluginDependencies(SplitFilterType, fwkplugin.StabilityAlpha, SplitFilterFactory, ReaderParser)
}
