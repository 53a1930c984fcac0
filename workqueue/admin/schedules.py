"""Admin for schedules: the list, an operator's own schedules, pause/resume/run-now.

Pause, resume and run-now take the change permission (run-now starts work on demand): a
staff user who may only view schedules is neither offered them nor able to post them.

Settings-defined schedules (``WORKQUEUE["SCHEDULES"]``) are read-only here except for the
actions; an operator's schedules are created, edited and deleted like any row, through the
same validation the settings and the command use (``workqueue.schedules.validate``).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models.functions import Now
from django.urls import reverse
from django.utils.html import format_html

from workqueue import schedules, values
from workqueue.admin.base import GuardedModelAdmin, ObjectAction, ObjectActionsMixin
from workqueue.exceptions import InvalidInput, InvalidSchedule
from workqueue.models import Schedule, WorkItem
from workqueue.templatetags.workqueue_admin import DASH, badge, duration, seconds_between, timestamp


class ScheduleForm(forms.ModelForm):
    """Refuses a bad cron expression, time zone, queue, kind or task with the reason.

    The interval and the priority are text read by ``workqueue.values`` (as the command and the
    settings read them), not Django's number fields, whose ``float()`` and ``int()`` take
    ``1e20``, ``nan`` and digits other than ASCII ones.
    """

    every = forms.CharField(
        required=False,
        help_text="Interval instead of cron: seconds, or 10s, 5m, 2h, 1d (0.1 s to 366 days).",
    )
    priority = forms.CharField(initial="0", help_text="A 32-bit integer; higher runs first.")

    class Meta:
        model = Schedule
        fields = (
            "name",
            "cron",
            "every",
            "timezone",
            "misfire",
            "queue",
            "key_prefix",
            "metadata",
            "priority",
            "kind",
            "request",
            "task",
            "args",
            "enabled",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        every = self.initial.get("every")
        if isinstance(every, float):  # "10s", which the field reads back, not "10.0"
            self.initial["every"] = f"{every:g}s"
        if "timezone" in self.fields:
            from django.conf import settings

            self.fields["timezone"].required = False
            self.fields["timezone"].help_text = f"IANA name; empty means {settings.TIME_ZONE}."

    def clean(self):
        data = super().clean()
        assert data is not None  # ModelForm.clean returns cleaned_data
        if self.errors:
            return data
        fields = {k: data.get(k) for k in self.Meta.fields if k != "enabled"}
        fields["cron"] = fields.get("cron") or ""
        fields["every"] = (fields.get("every") or "").strip() or None
        try:
            clean = schedules.validate(fields)
        except InvalidSchedule as exc:
            message = str(exc).split(": ", 1)[-1]
            field = next(
                (f for f, words in _FIELD_WORDS.items() if any(w in message for w in words)),
                None,
            )
            raise forms.ValidationError({field: message} if field else message)
        data.update({k: clean[k] for k in schedules.DEFINITION_FIELDS})
        return data

    def clean_priority(self):
        try:
            return values.priority(self.cleaned_data.get("priority") or "0", text=True)
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc))

    def clean_every(self):
        every = self.cleaned_data.get("every")
        if isinstance(every, float):  # an instance's own value, shown as it is stored
            return every
        return (every or "").strip() or None


_FIELD_WORDS = {
    "request": ("the request for kind", "request does not fit", "the encoded request"),
    "cron": ("cron expression",),
    "timezone": ("time zone",),
    "queue": ("queue",),
    "kind": ("operation kind", "kind "),
    "task": ("task",),
    "every": ("interval",),
}


@admin.register(Schedule)
class ScheduleAdmin(ObjectActionsMixin, GuardedModelAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "runs_display",
        "when_display",
        "next_display",
        "last_display",
        "status_display",
        "source",
    )
    list_filter = ("enabled", "source", "target")
    search_fields = ("name", "queue", "kind", "task")
    actions = ("pause", "resume", "run_now")
    # The same verbs on the schedule's own page (confirmed, POSTed; the change permission).
    object_actions = (
        ObjectAction("run_now", "Run now", "One extra run now; no slot is used.", lambda obj: obj.removed_at is None),
        ObjectAction(
            "pause", "Pause", "It stops firing (its record stays).", lambda obj: obj.enabled and obj.removed_at is None
        ),
        ObjectAction(
            "resume",
            "Resume",
            "It fires again from its next slot.",
            lambda obj: not obj.enabled and obj.removed_at is None,
        ),
    )
    show_facets = admin.ShowFacets.NEVER
    empty_value_display = DASH
    fieldsets = (
        (None, {"fields": ("name", "enabled")}),
        ("When", {"fields": (("cron", "every"), "timezone", "misfire")}),
        (
            "What it runs (one of)",
            {"fields": (("queue", "key_prefix"), "metadata", "priority", "kind", "request", "task", "args")},
        ),
        (
            "Record",
            {
                "fields": (
                    ("last_slot", "next_slot"),
                    ("last_fired_at", "last_display"),
                    "fired",
                    "last_error",
                    ("source", "removed_at"),
                )
            },
        ),
    )
    record_fields = (
        "last_slot",
        "next_slot",
        "last_fired_at",
        "last_display",
        "fired",
        "last_error",
        "source",
        "removed_at",
    )

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(db_now=Now())

    def get_urls(self):
        return self.object_action_urls() + super().get_urls()

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["object_actions"] = self.object_action_links(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def has_object_action_permission(self, request) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    def run_object_action(self, request, obj, name: str) -> str:
        if name == "run_now":
            try:
                return f"{obj.name}: enqueued {schedules.run_now(obj.name).key}."
            except Exception as exc:  # a kind or task no longer registered, a queue gone
                raise InvalidInput(str(exc)) from exc
        if name == "pause":
            schedules.pause([obj.name])
            return f"{obj.name}: paused."
        schedules.resume([obj.name])
        return f"{obj.name}: resumed."

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.source == Schedule.Source.SETTINGS:
            # Defined in settings: change it there. Pause, resume and run-now are the actions.
            return self.with_formats(f for fs in self.fieldsets for row in fs[1]["fields"] for f in _flat(row))
        return self.with_formats(self.record_fields)

    def has_change_permission(self, request, obj=None):
        # Defined in settings: a read-only view (no form, no Save buttons); change it in
        # WORKQUEUE["SCHEDULES"]. Its actions (run now, pause, resume) stay on the page.
        if obj is not None and obj.source == Schedule.Source.SETTINGS:
            return False
        return super().has_change_permission(request, obj)

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or obj.source != Schedule.Source.SETTINGS:
            return fieldsets
        swap = {"every": "every_display"}  # "10 s", not the stored float "10.0"
        return [
            (title, {**opts, "fields": tuple(_swap(row, swap) for row in opts["fields"])}) for title, opts in fieldsets
        ]

    @admin.display(description="every")
    def every_display(self, obj):
        return f"{obj.every:g} s" if obj.every is not None else DASH

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.source == Schedule.Source.SETTINGS and obj.removed_at is None:
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            now = obj.updated_at = schedules.db_now()
            timing_changed = not change or any(f in form.changed_data for f in schedules.TIMING_FIELDS)
            if timing_changed or (obj.enabled and "enabled" in form.changed_data):
                obj.next_slot = schedules.first_slot(schedules.timing_of(obj), now, obj.last_slot)
            if not change:
                obj.source = Schedule.Source.ADMIN
            super().save_model(request, obj, form, change)
            schedules.notify_changed()

    # -- columns --------------------------------------------------------------------------

    @admin.display(description="runs")
    def runs_display(self, obj):
        if obj.target == "item":
            return f"item on {obj.queue}"
        if obj.target == "operation":
            return f"operation {obj.kind}"
        return f"task {obj.task}"

    @admin.display(description="when")
    def when_display(self, obj):
        return schedules.timing_of(obj).describe()

    @admin.display(description="next run", ordering="next_slot")
    def next_display(self, obj):
        if obj.removed_at is not None or not obj.enabled or obj.next_slot is None:
            return DASH
        wait = seconds_between(obj.next_slot, getattr(obj, "db_now", None))
        text = "due now" if wait is None or wait <= 0 else f"in {duration(wait)}"
        # workqueue/live.js counts data-wait down each second (from the database's clock, not
        # the browser's); without JavaScript the text is as of the page's load.
        return format_html(
            '<time class="wq-countdown" datetime="{}" data-wait="{}" title="{}">{}</time>',
            obj.next_slot.isoformat(),
            f"{wait:.1f}" if wait is not None else "0",
            timestamp(obj.next_slot),
            text,
        )

    @admin.display(description="last run", ordering="last_fired_at")
    def last_display(self, obj):
        if not obj.last_key:
            return format_html("{}", obj.last_error[:80]) if obj.last_error else DASH
        item = (
            WorkItem.objects.filter(queue=obj.last_queue, key=obj.last_key)
            .order_by("-id")
            .only("id", "state", "outcome")
            .first()
        )
        if item is None:
            return format_html("{} (reaped)", obj.last_key)
        label = item.outcome or item.state
        url = reverse("admin:workqueue_workitem_change", args=[item.pk])
        text = format_html('<a href="{}">{}</a> · {}', url, obj.last_key, label)
        if obj.last_error:
            text = format_html("{} · {}", text, badge("error", "error", obj.last_error[:200]))
        return text

    @admin.display(description="status")
    def status_display(self, obj):
        if obj.removed_at is not None:
            return badge("removed", "quiet", "No longer in WORKQUEUE['SCHEDULES']; it does not fire")
        if not obj.enabled:
            return badge("paused", "warn")
        return badge("enabled", "ok")

    # -- actions --------------------------------------------------------------------------

    @admin.action(description="Pause (stop firing)", permissions=["change"])
    def pause(self, request, queryset):
        changed = schedules.pause(queryset.values_list("name", flat=True))
        self.message_user(request, f"Paused {_schedules(changed)}.", messages.SUCCESS)

    @admin.action(description="Resume (fire again from the next slot)", permissions=["change"])
    def resume(self, request, queryset):
        changed = schedules.resume(queryset.filter(removed_at__isnull=True).values_list("name", flat=True))
        self.message_user(request, f"Resumed {_schedules(changed)}.", messages.SUCCESS)

    @admin.action(description="Run now (one extra run, no slot used)", permissions=["change"])
    def run_now(self, request, queryset):
        keys = []
        for name in queryset.values_list("name", flat=True):
            try:
                keys.append(schedules.run_now(name).key)
            except Exception as exc:
                self.message_user(request, f"{name}: {exc}", messages.ERROR)
        if keys:
            self.message_user(request, f"Enqueued {', '.join(keys)}.", messages.SUCCESS)


def _swap(row, swap: dict):
    if isinstance(row, tuple):
        return tuple(swap.get(f, f) for f in row)
    return swap.get(row, row)


def _schedules(n: int) -> str:
    return f"{n:,} schedule" if n == 1 else f"{n:,} schedules"


def _flat(row):
    return row if isinstance(row, tuple) else (row,)
