package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"reflect"

	"github.com/danielgtaylor/huma/v2"
)

// JSON cannot carry NaN or ±Inf, and encoding/json refuses them
// (json.UnsupportedValueError). huma marshals a response after it sent the
// status line, so such an error used to panic the handler and close the
// connection for every reader of the endpoint (issue 29: one device's
// 1e308 throughput overflowed a series mean to +Inf). Values are bounded
// at ingest (protocol.RunBounds) and aggregates computed so they cannot
// overflow; this format is the last line: a response that still holds a
// non-finite number is sent with NaN as 0 and ±Inf as ±math.MaxFloat64,
// and the clamping is logged.

// finiteFormats returns huma's JSON formats with marshalFinite.
func finiteFormats(log *slog.Logger) map[string]huma.Format {
	f := huma.Format{Marshal: func(w io.Writer, v any) error { return marshalFinite(w, v, log) }, Unmarshal: unmarshalJSON}
	return map[string]huma.Format{"application/json": f, "json": f}
}

// marshalFinite encodes v as huma's default JSON format does; when v holds
// a non-finite float it encodes v with those clamped instead.
func marshalFinite(w io.Writer, v any, log *slog.Logger) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	var uv *json.UnsupportedValueError
	if errors.As(err, &uv) {
		log.Error("api: response held a non-finite number, clamped", "value", uv.Str)
		buf.Reset()
		err = enc.Encode(clampNonFinite(v))
	}
	if err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// clampNonFinite returns v with every NaN float replaced by 0 and every
// ±Inf by the largest finite value of its type, in place where v reaches
// them through pointers, slices and maps, in a copy otherwise.
func clampNonFinite(v any) any {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return v
	}
	cp := reflect.New(rv.Type()).Elem()
	cp.Set(rv)
	clampValue(cp, 0)
	return cp.Interface()
}

func clampValue(v reflect.Value, depth int) {
	if depth > 64 {
		return
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if !v.CanSet() {
			return
		}
		top := math.MaxFloat64
		if v.Kind() == reflect.Float32 {
			top = math.MaxFloat32
		}
		switch f := v.Float(); {
		case math.IsNaN(f):
			v.SetFloat(0)
		case math.IsInf(f, 1):
			v.SetFloat(top)
		case math.IsInf(f, -1):
			v.SetFloat(-top)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			clampValue(v.Elem(), depth+1)
		}
	case reflect.Interface:
		if v.IsNil() || !v.CanSet() {
			return
		}
		e := v.Elem()
		cp := reflect.New(e.Type()).Elem()
		cp.Set(e)
		clampValue(cp, depth+1)
		v.Set(cp)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				clampValue(v.Field(i), depth+1)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			clampValue(v.Index(i), depth+1)
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			e := it.Value()
			cp := reflect.New(e.Type()).Elem()
			cp.Set(e)
			clampValue(cp, depth+1)
			v.SetMapIndex(it.Key(), cp)
		}
	}
}
