"""Environments and API keys: create, rotate (a new key shown once), revoke."""

from __future__ import annotations

import django
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.cache import add_never_cache_headers, patch_cache_control
from django.utils.html import format_html

from workqueue.admin.base import (
    GuardedModelAdmin,
)
from workqueue.environments import create_api_key, create_environment, rotate_environment_key
from workqueue.models import (
    ApiKey,
    Environment,
)
from workqueue.templatetags.workqueue_admin import badge, relative


class KeyCreatingAdmin(GuardedModelAdmin):
    """Create rows whose key is minted by ``workqueue.environments``: shown once, stored hashed."""

    create_fields: tuple[str, ...] = ("name",)
    key_noun = "key"

    def create(self, cleaned_data):  # -> (obj, key)
        raise NotImplementedError

    def get_fields(self, request, obj=None):
        return self.create_fields if obj is None else super().get_fields(request, obj)

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.with_formats(self.readonly_fields)

    def save_model(self, request, obj, form, change):
        if change:
            # Only what the form edits: a full save could undo a key rotated meanwhile.
            columns = {f.name for f in type(obj)._meta.concrete_fields}
            changed = [f for f in form.changed_data if f in form.fields and f in columns]  # m2m: save_related
            if changed:
                obj.save(update_fields=changed)
            return
        created, key = self.create(form.cleaned_data)
        for f in type(obj)._meta.concrete_fields:
            setattr(obj, f.attname, getattr(created, f.attname))
        obj._state.adding, obj._state.db = False, created._state.db
        request._workqueue_new_key = key  # shown by response_add, on the response itself

    def response_add(self, request, obj, post_url_continue=None):
        key = getattr(request, "_workqueue_new_key", None)
        if key is None:
            return super().response_add(request, obj, post_url_continue)
        return self.show_key(request, obj, key, title=f"{str(self.opts.verbose_name).capitalize()} added")

    def show_key(self, request, obj, key: str, *, title: str):
        """Render the key on this response, never through messages (a cookie by default) or
        the session: it exists only in this page, which no cache may keep."""
        context = {
            **self.admin_site.each_context(request),
            "legacy_breadcrumbs": django.VERSION < (6, 0),
            "title": title,
            "subtitle": str(obj),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "original": obj,
            "key": key,
            "key_noun": self.key_noun,
            "change_url": reverse(
                f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change", args=[quote(obj.pk)]
            ),
        }
        request.current_app = self.admin_site.name
        response = TemplateResponse(request, "admin/workqueue/key_shown.html", context)
        add_never_cache_headers(response)
        patch_cache_control(response, no_store=True)
        return response

    @admin.display(description="key")
    def key_hint_display(self, obj):
        return format_html('<code title="The key\'s first characters">{}…</code>', obj.key_hint)

    @admin.display(description="created", ordering="created_at")
    def created_display(self, obj):
        return relative(obj.created_at)


@admin.register(Environment)
class EnvironmentAdmin(KeyCreatingAdmin):
    list_display = ("name", "kind", "id_display", "key_hint_display", "created_display", "rotated_display")
    list_filter = ("kind",)
    search_fields = ("name", "=id")
    create_fields = ("name", "kind")
    fields = ("id", "name", "kind", "key_hint_display", "created_at", "key_rotated_at")
    readonly_fields = ("id", "kind", "key_hint_display", "created_at", "key_rotated_at")
    key_noun = "environment key"

    @admin.display(description="id", ordering="id")
    def id_display(self, obj):
        """The id's head in the list (ids are long); the whole id on hover and on the page."""
        return format_html('<code title="{}">{}…</code>', obj.id, obj.id[:12]) if len(obj.id) > 12 else obj.id

    @admin.display(description="key rotated", ordering="key_rotated_at")
    def rotated_display(self, obj):
        return relative(obj.key_rotated_at)

    def create(self, cleaned_data):
        return create_environment(cleaned_data["name"], cleaned_data["kind"])

    def get_urls(self):
        return [
            path(
                "<path:object_id>/rotate-key/",
                self.admin_site.admin_view(self.rotate_key_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_rotate_key",
            ),
            *super().get_urls(),
        ]

    def rotate_key_view(self, request, object_id):
        """Confirm, then give the environment a new key (shown once); the old key stops working."""
        env = self.get_object(request, unquote(object_id))
        if env is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]  # Django's, missing from the stubs
        if not self.has_change_permission(request, env):
            raise PermissionDenied
        change_url = reverse(f"{self.admin_site.name}:workqueue_environment_change", args=[quote(env.pk)])
        if request.method == "POST":
            key = rotate_environment_key(env)
            self.log_change(request, env, "Rotated the environment key.")
            return self.show_key(request, env, key, title="Environment key rotated")
        context = {
            **self.admin_site.each_context(request),
            # Django 5.2's admin styles div.breadcrumbs; 6.x styles ol.breadcrumbs.
            "legacy_breadcrumbs": django.VERSION < (6, 0),
            "title": "Rotate the environment key?",
            "subtitle": str(env),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "original": env,
            "change_url": change_url,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/workqueue/environment/rotate_key.html", context)


class ApiKeyAddForm(forms.ModelForm):
    """The new key's scope, chosen explicitly: its environments, or site-wide (never both, never
    neither). Site-wide is decided here, once; no later change widens a key."""

    site_wide = forms.BooleanField(
        required=False,
        label="Site-wide",
        help_text="Valid for every environment, those created later too. Leave it off and choose environments "
        "to limit the key to them.",
    )

    class Meta:
        model = ApiKey
        fields = ("name", "site_wide", "environments")

    def clean(self):
        data = super().clean()
        assert data is not None  # ModelForm.clean returns cleaned_data
        chosen = data.get("environments")
        if data.get("site_wide") and chosen:
            raise forms.ValidationError("Choose the key's environments or make it site-wide, not both.")
        if not data.get("site_wide") and not chosen and "environments" not in self.errors:
            raise forms.ValidationError(
                "Choose the environments this key may act on, or tick Site-wide for a key valid everywhere."
            )
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(KeyCreatingAdmin):
    list_display = ("name", "key_hint_display", "status_display", "environments_display", "created_display")
    list_filter = ("revoked", "site_wide")
    search_fields = ("name",)
    create_fields = ("name", "site_wide", "environments")
    fields = ("name", "environments_display", "environments", "key_hint_display", "status_display", "created_at")
    readonly_fields = ("environments_display", "key_hint_display", "status_display", "created_at")
    filter_horizontal = ("environments",)
    actions = ("revoke",)
    key_noun = "API key"

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if obj is not None and obj.site_wide:
            # Valid everywhere by how it was created; narrow it by making a scoped key instead.
            return tuple(f for f in fields if f != "environments")
        return fields

    def create(self, cleaned_data):
        return create_api_key(
            cleaned_data["name"],
            environments=cleaned_data.get("environments") or (),
            site_wide=bool(cleaned_data.get("site_wide")),
        )

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("environments")

    def save_related(self, request, form, formsets, change):
        if change:  # on add, create() already set them
            super().save_related(request, form, formsets, change)

    @admin.display(description="scope")
    def environments_display(self, obj):
        scope = obj.scope()
        if not obj.site_wide and scope == "no environments":
            return badge(scope, "error", "Its environments were deleted: it acts on none (401)")
        return scope

    @admin.display(description="status", ordering="revoked")
    def status_display(self, obj):
        return badge("revoked", "error") if obj.revoked else badge("active", "ok")

    @admin.action(description="Revoke selected API keys (they stop working at once)", permissions=["change"])
    def revoke(self, request, queryset):
        revoked = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(request, f"Revoked {revoked:,} API key{'s' if revoked != 1 else ''}.", messages.SUCCESS)
