package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// jsonCodec is Connect's JSON codec, except that an unknown enum value name
// is an error. Unknown fields are still discarded (clients may be newer than
// the server), and protojson's DiscardUnknown discards unknown enum names
// with them: a filter of ["INSTANCE_STATUS_COMPLETD"] would become no status
// filter at all, and a bulk delete would take every status. Unknown numbers
// are refused by validation already.
type jsonCodec struct{ name string }

// option replaces Connect's JSON codec of the same name (it registers two).
func (c jsonCodec) option() connect.HandlerOption { return connect.WithCodec(c) }

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return protojson.MarshalOptions{}.Marshal(msg)
}

func (c jsonCodec) Unmarshal(data []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	if len(data) == 0 {
		return fmt.Errorf("zero-length payload is not a valid JSON object")
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, msg); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return err
	}
	return checkEnumNames(tree, msg.ProtoReflect().Descriptor(), "")
}

// checkEnumNames walks a JSON message as protojson reads it and reports the
// first enum value given by a name its enum does not have.
func checkEnumNames(v any, md protoreflect.MessageDescriptor, path string) error {
	obj, ok := v.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return nil // a well-known type's JSON form holds no enum of ours
	}
	fields := md.Fields()
	for key, val := range obj {
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil || val == nil {
			continue // unknown: discarded
		}
		at := key
		if path != "" {
			at = path + "." + key
		}
		switch {
		case fd.IsMap():
			entries, _ := val.(map[string]any)
			for k, item := range entries {
				if err := checkEnumValue(item, fd.MapValue(), at+"["+k+"]"); err != nil {
					return err
				}
			}
		case fd.IsList():
			items, _ := val.([]any)
			for i, item := range items {
				if err := checkEnumValue(item, fd, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		default:
			if err := checkEnumValue(val, fd, at); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkEnumValue(v any, fd protoreflect.FieldDescriptor, path string) error {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		name, ok := v.(string)
		if ok && fd.Enum().Values().ByName(protoreflect.Name(name)) == nil {
			return fmt.Errorf("%s: %q is not a value of %s", path, name, fd.Enum().FullName())
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkEnumNames(v, fd.Message(), path)
	}
	return nil
}
