package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/profile/spec"
)

// profileHandler serves /v1/devices/{id}/profile: the storage and compute
// profile a real device measured on itself (`lesfarm profile measure
// --upload`), from which `lesfarm agent --profile twin:ID` emulates it.
type profileHandler struct {
	st  *store.Store
	log *slog.Logger
}

type putProfileInput struct {
	ID   string `path:"id" pattern:"^[A-Za-z0-9_-]{1,64}$"`
	Body struct {
		YAML string `json:"yaml" minLength:"1" maxLength:"262144" doc:"The profile YAML written by 'lesfarm profile measure', as read by --profile FILE. It must parse and validate (bandwidth, latency, max_in_flight, compute section ...)." example:"name: pixel8-a1"`
	}
}

type profileOutput struct {
	Body *DeviceProfile
}

// noProfileErr is the 404 of a device that never uploaded a profile; its
// detail is the hint the agent prints as is.
func noProfileErr(id string) error {
	return huma.Error404NotFound(fmt.Sprintf("no measured profile for device %s; run lesfarm profile measure --upload on it", id))
}

// RegisterPut registers PUT /v1/devices/{id}/profile.
func (h *profileHandler) RegisterPut(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "put-device-profile", Method: http.MethodPut, Path: "/v1/devices/{id}/profile",
		Summary: "Store a device's measured profile", Tags: []string{"devices"},
		Description: "Replaces the device's measured profile with the YAML 'lesfarm profile measure' wrote on it. The YAML is validated with the runtime's profile parser; a profile that --profile FILE would refuse is a 422. The device need not have said hello yet.",
	}), func(ctx context.Context, in *putProfileInput) (*profileOutput, error) {
		p, err := spec.Parse([]byte(in.Body.YAML))
		if err != nil {
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.yaml", Message: err.Error()})
		}
		out, err := h.st.PutDeviceProfile(ctx, &store.DeviceProfile{DeviceID: in.ID, Name: p.Name, YAML: in.Body.YAML})
		if err != nil {
			return nil, storeErr(ctx, h.log, "device profile", err)
		}
		return &profileOutput{Body: profileFromStore(out)}, nil
	})
}

// RegisterGet registers GET /v1/devices/{id}/profile.
func (h *profileHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-device-profile", Method: http.MethodGet, Path: "/v1/devices/{id}/profile",
		Summary: "Get a device's measured profile", Tags: []string{"devices"},
		Description: "The YAML as uploaded, with the profile's name and the upload time. 404 when the device never uploaded one.",
	}, func(ctx context.Context, in *deviceIDInput) (*profileOutput, error) {
		p, err := h.st.GetDeviceProfile(ctx, in.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, noProfileErr(in.ID)
		}
		if err != nil {
			return nil, storeErr(ctx, h.log, "device profile", err)
		}
		return &profileOutput{Body: profileFromStore(p)}, nil
	})
}
