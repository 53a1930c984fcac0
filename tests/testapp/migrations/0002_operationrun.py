from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("testapp", "0001_initial")]

    operations = [
        migrations.CreateModel(
            name="OperationRun",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("op_id", models.CharField(max_length=200)),
                ("kind", models.CharField(max_length=128)),
                ("event", models.CharField(max_length=16)),
                ("attempt", models.IntegerField()),
                ("final", models.BooleanField()),
                ("pid", models.IntegerField()),
                ("at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
