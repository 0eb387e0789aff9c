package main

// extraCommands lists the tool subcommands beside the three service roles.
// Each lives in its own file; add it here when it lands.
func extraCommands() []command {
	return []command{
		whatifCommand(),
		evalCommand(),
		demoCommand(),
		loadgenCommand(),
		suiteCommand(),
		abuseCommand(),
		fidelityCommand(),
		calibrateCommand(),
	}
}
