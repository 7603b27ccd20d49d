"""A file upload is the one body that is not JSON, and one over the front door's limit is refused by
name before any route reads it; every other route still refuses a form."""

from __future__ import annotations

from frontdoor.schemas import MAX_BODY_BYTES
from frontdoor.uploads_routes import UPLOAD_PART_BYTES
from tests.unit.frontdoor.test_frontdoor_rejections import call, event

FORM = "multipart/form-data; boundary=XyZ"


def test_an_upload_over_the_limit_is_refused_with_413_naming_it():
    status, body = call(event("POST", "/v1/files", "x" * (MAX_BODY_BYTES + 1), FORM))
    assert status == 413
    assert body["error"]["code"] == "file_too_large"
    assert str(MAX_BODY_BYTES) in body["error"]["message"]
    assert f"part_size={UPLOAD_PART_BYTES}" in body["error"]["message"], "it names the way round the limit"


def test_an_upload_part_is_a_form_too_and_bounded_alike():
    status, body = call(event("POST", "/v1/uploads/upload_1/parts", "x" * (MAX_BODY_BYTES + 1), FORM))
    assert status == 413
    assert body["error"]["code"] == "file_too_large"


def test_the_named_part_fits_the_body_limit_with_room_for_the_form():
    assert UPLOAD_PART_BYTES + 64 * 1024 <= MAX_BODY_BYTES


def test_a_form_anywhere_else_is_still_refused_as_not_json():
    status, body = call(event("POST", "/v1/batches", "--XyZ--", FORM))
    assert status == 415
    assert body["error"]["code"] == "unsupported_media_type"


def test_an_upload_must_be_a_form():
    status, body = call(event("POST", "/v1/files", '{"purpose": "batch"}'))
    assert status == 415
    assert "multipart/form-data" in body["error"]["message"]
