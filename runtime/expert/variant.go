package expert

// lookaheadVariant is a build variant fixed at link time:
//
//	go build -ldflags "-X github.com/lesfarm/lesfarm/runtime/expert.lookaheadVariant=off" ./cmd/lesfarm
//
// "off" compiles a runtime whose stores never predict or prefetch, as if
// every Options.NoLookahead were set: a different build of the code, with
// its own executable and sha256, not a switch an agent can flip. The farm's
// demo and end-to-end tests push such a build beside the baseline to show
// that a build under test really runs its own code. Empty (the default)
// and any other value leave lookahead as the options say.
var lookaheadVariant string

// LookaheadCompiledOut reports whether this executable was linked with
// lookahead turned off (lookaheadVariant "off").
func LookaheadCompiledOut() bool { return lookaheadVariant == "off" }

// LookaheadVariantFlag is the -ldflags value that links a build with
// lookahead turned off (lookaheadVariant).
const LookaheadVariantFlag = "-X github.com/lesfarm/lesfarm/runtime/expert.lookaheadVariant=off"
