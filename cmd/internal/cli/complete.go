package cli

import "github.com/posener/complete"

// predictors complete the values of flags and arguments whose tags name
// them (predictor:"NAME"), for shell completion (complete -C): files for
// the journals, plans and outputs; the rest complete what their enum
// lists, or nothing.
var predictors = map[string]complete.Predictor{
	"file": complete.PredictFiles("*"),
	"plan": complete.PredictFiles("*.jsonl"),
	// audit's --provider, whose enum's empty value (none) is no word to offer
	"providers": complete.PredictSet(providerStripe, providerPayPal, providerAdyen, providerExec),
}
