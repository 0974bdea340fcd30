package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// deviceHandler serves /v1/devices: the phones and host agents that said
// hello, their state, labels and drain flag.
type deviceHandler struct {
	st  *store.Store
	log *slog.Logger
}

type listDevicesInput struct {
	State       string   `query:"state" enum:"online,lost"`
	Platform    string   `query:"platform" enum:"android,ios,linux,darwin"`
	DeviceModel string   `query:"device_model" maxLength:"200" example:"Pixel 8"`
	Emulated    string   `query:"emulated" enum:"true,false"`
	Drained     string   `query:"drained" enum:"true,false"`
	Label       []string `query:"label,explode" maxItems:"16" doc:"key=value; repeat for several (all must match the device's effective labels)." example:"pool=ci"`
	Cursor      string   `query:"cursor" maxLength:"64" doc:"next_cursor of the previous page."`
	Limit       int      `query:"limit" minimum:"1" maximum:"1000" default:"100"`
}

type listDevicesOutput struct {
	Body struct {
		Items      []Device `json:"items" doc:"Devices ordered by id."`
		NextCursor string   `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page." example:"pixel8-a1"`
	}
}

func boolParam(s string) *bool {
	if s == "" {
		return nil
	}
	b := s == "true"
	return &b
}

// parseLabels parses key=value pairs, reporting errors at loc[i].
func parseLabels(pairs []string, loc string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	var errs []error
	for i, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || !labelKeyRE.MatchString(k) || len(v) > jobs.MaxLabelLen {
			errs = append(errs, &huma.ErrorDetail{Location: fmt.Sprintf("%s[%d]", loc, i), Message: "want key=value with a key of letters, digits, '.', '_', '-' or '/'", Value: p})
			continue
		}
		out[k] = v
	}
	if len(errs) > 0 {
		return nil, huma.Error422UnprocessableEntity("validation failed", errs...)
	}
	return out, nil
}

var labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`)

// RegisterList registers GET /v1/devices.
func (h *deviceHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-devices", Method: http.MethodGet, Path: "/v1/devices",
		Summary: "List devices", Tags: []string{"devices"},
		Description: "Devices ordered by id, filtered by state, platform, model, emulation, drain flag and labels; paginate with cursor.",
	}, func(ctx context.Context, in *listDevicesInput) (*listDevicesOutput, error) {
		labels, err := parseLabels(in.Label, "query.label")
		if err != nil {
			return nil, err
		}
		items, err := h.st.ListDevices(ctx, &store.ListDevicesParams{
			State: in.State, Platform: in.Platform, DeviceModel: in.DeviceModel,
			Emulated: boolParam(in.Emulated), Drained: boolParam(in.Drained), Labels: labels,
			After: in.Cursor, Limit: in.Limit + 1,
		})
		if err != nil {
			return nil, storeErr(ctx, h.log, "devices", err)
		}
		out := &listDevicesOutput{}
		if len(items) > in.Limit {
			items = items[:in.Limit]
			out.Body.NextCursor = items[len(items)-1].ID
		}
		out.Body.Items = mapSlice(items, deviceFromStore)
		return out, nil
	})
}

type deviceIDInput struct {
	ID string `path:"id" pattern:"^[A-Za-z0-9_-]{1,64}$"`
}

type deviceOutput struct {
	Body *Device
}

// RegisterGet registers GET /v1/devices/{id}.
func (h *deviceHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-device", Method: http.MethodGet, Path: "/v1/devices/{id}",
		Summary: "Get a device", Tags: []string{"devices"},
	}, func(ctx context.Context, in *deviceIDInput) (*deviceOutput, error) {
		d, err := h.st.GetDevice(ctx, in.ID)
		if err != nil {
			return nil, storeErr(ctx, h.log, "device", err)
		}
		out := deviceOut(d)
		withRejections(ctx, h.st, out.Body)
		return out, nil
	})
}

type labelInput struct {
	ID   string `path:"id" pattern:"^[A-Za-z0-9_-]{1,64}$"`
	Body struct {
		Labels map[string]string `json:"labels" maxProperties:"64" doc:"Operator labels; they replace the previous operator labels and win over the agent's own labels."`
	}
}

// RegisterLabel registers PUT /v1/devices/{id}/labels.
func (h *deviceHandler) RegisterLabel(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "set-device-labels", Method: http.MethodPut, Path: "/v1/devices/{id}/labels",
		Summary: "Replace a device's operator labels", Tags: []string{"devices"},
	}), func(ctx context.Context, in *labelInput) (*deviceOutput, error) {
		var errs []error
		for k, v := range in.Body.Labels {
			if !labelKeyRE.MatchString(k) {
				errs = append(errs, &huma.ErrorDetail{Location: "body.labels." + k, Message: "label keys are letters, digits, '.', '_', '-' or '/' (at most 128)", Value: k})
			} else if len(v) > jobs.MaxLabelLen {
				errs = append(errs, &huma.ErrorDetail{Location: "body.labels." + k, Message: fmt.Sprintf("label value longer than %d", jobs.MaxLabelLen)})
			}
		}
		if len(errs) > 0 {
			return nil, huma.Error422UnprocessableEntity("validation failed", errs...)
		}
		d, err := h.st.SetDeviceLabels(ctx, in.ID, in.Body.Labels)
		if err != nil {
			return nil, storeErr(ctx, h.log, "device", err)
		}
		return deviceOut(d), nil
	})
}

// RegisterDrain registers POST /v1/devices/{id}/drain: the device finishes
// its current run and gets no new ones.
func (h *deviceHandler) RegisterDrain(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "drain-device", Method: http.MethodPost, Path: "/v1/devices/{id}/drain",
		Summary: "Drain a device", Tags: []string{"devices"},
	}), func(ctx context.Context, in *deviceIDInput) (*deviceOutput, error) {
		d, err := h.st.SetDeviceDrained(ctx, in.ID, true)
		if err != nil {
			return nil, storeErr(ctx, h.log, "device", err)
		}
		return deviceOut(d), nil
	})
}

// RegisterUndrain registers POST /v1/devices/{id}/undrain.
func (h *deviceHandler) RegisterUndrain(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "undrain-device", Method: http.MethodPost, Path: "/v1/devices/{id}/undrain",
		Summary: "Undrain a device", Tags: []string{"devices"},
	}), func(ctx context.Context, in *deviceIDInput) (*deviceOutput, error) {
		d, err := h.st.SetDeviceDrained(ctx, in.ID, false)
		if err != nil {
			return nil, storeErr(ctx, h.log, "device", err)
		}
		return deviceOut(d), nil
	})
}
