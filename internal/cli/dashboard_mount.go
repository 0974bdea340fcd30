package cli

import (
	"net/http"

	"github.com/lesfarm/lesfarm/dashboard"
)

// mountDashboard serves the embedded dashboard at "/" next to the REST API.
func mountDashboard(mux *http.ServeMux) { mux.Handle("/", dashboard.Handler()) }
