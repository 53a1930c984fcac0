"""Run in the embedded site: every admin URL of both apps a superuser may open, with an object where needed."""

import json
import os

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import RequestFactory
from django.urls import reverse

apps = ("workqueue", "operations")
request = RequestFactory().get("/admin/")
request.user = get_user_model().objects.get(username=os.environ["EMBED_ADMIN_USER"])
urls = [["index", reverse("admin:index")]] + [[a, reverse("admin:app_list", args=[a])] for a in apps]
missing = []
for model, model_admin in admin.site._registry.items():
    if model._meta.app_label not in apps:
        continue
    obj = model._default_manager.order_by("pk").first()
    for pattern in model_admin.get_urls():
        name = pattern.name
        if not name:
            continue
        if name.endswith("_add") and not model_admin.has_add_permission(request):
            continue
        if name.endswith("_delete") and not model_admin.has_delete_permission(request, obj):
            continue
        if "object_id" in str(pattern.pattern):
            if obj is None:
                missing.append(name)
                continue
            if "<str:action>" in str(pattern.pattern):
                # an object action's confirmation page: one per action the row's state admits
                for link in model_admin.object_action_links(request, obj):
                    urls.append([f"{name} {link['label']}", link["url"]])
                continue
            urls.append([name, reverse("admin:" + name, args=[obj.pk])])
        else:
            urls.append([name, reverse("admin:" + name)])
print("EMBED_JSON " + json.dumps({"urls": urls, "missing": missing}))
