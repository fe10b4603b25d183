package stripesim

import (
	"fmt"
	"net/http"

	"github.com/refundkit/refundkit/refund/sim"
)

// writeGatewayAnswer writes a gateway's own answer on a Stripe route: an
// HTML page, or Stripe's api_error shape when stripeBody asks for it.
func writeGatewayAnswer(w http.ResponseWriter, status int, stripeBody bool) {
	var body []byte
	if stripeBody {
		body = errorBody(apiError{Type: typeAPI, Message: fmt.Sprintf("An error occurred at the gateway in front of the API (%d %s).", status, sim.GatewayText(status))})
	}
	sim.WriteGatewayAnswer(w, status, body)
}
