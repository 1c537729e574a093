"""Launching on EC2: one instance (``RunInstances``) or a fleet (``CreateFleet``).

:class:`Ec2Launch` is the top floor of
:class:`~spothop.providers.aws.provider.AwsProvider` (on
:class:`.instances.Ec2Instances`: a launch ends by describing what it
started, and terminates it where it raises); ``AwsProvider.__init__`` sets
the attributes it declares.

- ``launch``: ``RunInstances``, spot as ``InstanceMarketOptions`` one-time
  with ``terminate`` on interruption, IMDSv2 required (hop limit 2, so
  containers on the instance reach it too), the launch token as
  ``ClientToken`` (a retried call cannot start a second instance) and the
  user-data of :mod:`spothop.providers.aws.userdata` (a credential in it is
  refused before any call). The rate at launch is tagged
  :data:`~.instances.PRICE_TAG`. A launch that raises after EC2 started the
  instance terminates it: nothing is left behind.
- ``launch_fleet`` (:class:`~spothop.providers.extensions.FleetLauncher`):
  ``CreateFleet`` of type ``instant`` with the ``price-capacity-optimized``
  spot allocation across every type and zone asked, from a launch template
  made for the call and deleted after it (a template left behind costs
  nothing: a warning says so). Fewer instances than ``min_count``: those
  started are terminated and the first refusal (else
  :class:`~spothop.errors.CapacityUnavailable`) is raised. Each fleet
  instance is tagged its node (``NODE-i``) and its rate.
- The image: the request's ``image_id`` (the job's AMI), else the provider's
  ``image_id``, else the Deep Learning AMI's public SSM parameter (read once per
  region); a ConfigError naming :data:`IMAGE_ID_ENV` where that cannot be read.
- The root volume: a request's ``disk`` is a block device mapping on the
  image's root device (``DescribeImages``' ``RootDeviceName``) with its size
  and the tier's volume type (:data:`EBS_TIERS`).
- spothop on the instance: ``install`` (a shell command) when given; else,
  with the control plane's wheel (the launch's ``distribution``), the
  wheel into a fresh venv with its dependencies from the package index, or,
  with ``install_dependencies`` off (a custom AMI whose ``python3`` already
  has spothop's dependencies), the wheel alone on that interpreter's
  packages (:func:`spothop.providers.bootstrap.install_step`); else
  spothop's version from the package index.
- No reserved pools are held: a request naming one is refused
  (:func:`~spothop.providers.reservations.refuse_reservation`).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from spothop.errors import CapacityUnavailable, ConfigError, ProviderError
from spothop.providers.aws import sdk
from spothop.providers.aws.errors import map_error
from spothop.providers.aws.instances import PRICE_TAG, Ec2Instances
from spothop.providers.aws.userdata import render_user_data
from spothop.providers.base import DiskSpec, DiskTier, Instance, LaunchRequest
from spothop.providers.extensions import FleetRequest, FleetResult
from spothop.providers.local.metadata.aws import ERROR_CODES
from spothop.providers.records import NODE_TAG, TOKEN_TAG, launch_tags, new_token, number_text
from spothop.providers.reservations import refuse_reservation

log = logging.getLogger("spothop.providers.aws")

IMAGE_ID_ENV = "SPOTHOP_AWS_IMAGE_ID"  # the image_id option's variable (provider.ENV_OPTIONS)
DEEP_LEARNING_AMI = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)


class Ec2Launch(Ec2Instances):
    """Launching instances and fleets on EC2. See the module docstring."""

    image_id: str | None
    instance_profile: str | None
    security_group_ids: list[str]
    key_name: str | None
    install: str | None
    install_dependencies: bool
    _images: dict[str, str]  # region → the Deep Learning AMI's id there

    def _image(self, region: str) -> str:
        if self.image_id:
            return self.image_id
        if region not in self._images:
            try:
                answer = self._call(region, "get_parameter", service="ssm", Name=DEEP_LEARNING_AMI)
            except ProviderError as exc:
                raise ConfigError(
                    f"{self.name}: no AMI to launch in {region}: the Deep Learning AMI's public "
                    f"parameter could not be read ({exc}); set image_id= or "
                    f"{IMAGE_ID_ENV} to an AMI with NVIDIA drivers and Python 3.11+"
                ) from None
            self._images[region] = str(answer["Parameter"]["Value"])
        return self._images[region]

    def _tags(self, request: LaunchRequest, token: str) -> dict[str, str]:
        tags, node = launch_tags(request.tags, request.name, token)
        tags.setdefault("Name", request.name or node or f"spothop-{token}")
        return tags

    def _instance_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        image = request.image_id or self._image(region)
        params: dict[str, Any] = {
            "ImageId": image,
            "MetadataOptions": {
                "HttpTokens": "required",
                "HttpEndpoint": "enabled",
                "HttpPutResponseHopLimit": 2,  # containers on the instance reach IMDS too
            },
            "InstanceInitiatedShutdownBehavior": "terminate",
        }
        if self.instance_profile:
            key = "Arn" if self.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: self.instance_profile}
        if self.security_group_ids:
            params["SecurityGroupIds"] = list(self.security_group_ids)
        if self.key_name:
            params["KeyName"] = self.key_name
        if request.disk is not None:
            device = self._root_device(region, image)
            params["BlockDeviceMappings"] = [
                {"DeviceName": device, "Ebs": ebs_volume(request.disk)}
            ]
        return params

    def _root_device(self, region: str, image: str) -> str:
        """The image's root device name (``/dev/sda1``, ``/dev/xvda``): the mapping that sizes
        the root volume must name it, or EC2 adds a second volume instead. An image EC2 does not
        know there is its refusal (``InvalidAMIID.NotFound``), as ``RunInstances`` would give."""
        answer = self._call(region, "describe_images", ImageIds=[image])
        found = answer.get("Images") or [{}]
        return str(found[0].get("RootDeviceName") or "/dev/sda1")

    def _user_data(self, request: LaunchRequest) -> str:
        env = {"SPOTHOP_CLOUD": self.name, **request.env}
        return render_user_data(
            request.bootstrap_command,
            env,
            install=self.install,
            image=request.image,
            distribution=request.distribution,
            with_dependencies=self.install_dependencies,
        )

    def launch(self, request: LaunchRequest) -> Instance:
        refuse_reservation(self.name, ERROR_CODES.invalid_parameter, request)  # no pools held yet
        region = sdk.check_region(self.name, self._session, request.region)
        user_data = self._user_data(request)  # refuses a credential before any call
        token = request.tags.get(TOKEN_TAG) or new_token()
        tags = self._tags(request, token)
        if request.zone is not None:
            tags[PRICE_TAG] = number_text(
                self._price(region, request.zone, request.instance_type, request.spot)
            )
        params = self._instance_params(request, region) | {
            "InstanceType": request.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": token[:64],
            "UserData": user_data,
            "TagSpecifications": _tag_specifications(tags),
        }
        if request.zone is not None:
            params["Placement"] = {"AvailabilityZone": request.zone}
        if request.spot:
            spot_options: dict[str, Any] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if request.max_price_usd_per_hour is not None:
                spot_options["MaxPrice"] = number_text(request.max_price_usd_per_hour)
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot_options}
        answer = self._call(region, "run_instances", **params)
        raw = answer["Instances"][0]
        instance_id = str(raw["InstanceId"])
        self._region_of[instance_id] = region
        try:
            if PRICE_TAG not in tags:
                zone = raw["Placement"]["AvailabilityZone"]
                price = number_text(self._price(region, zone, request.instance_type, request.spot))
                self._call(
                    region,
                    "create_tags",
                    Resources=[instance_id],
                    Tags=[{"Key": PRICE_TAG, "Value": price}],
                )
                raw = {**raw, "Tags": [*raw.get("Tags", []), {"Key": PRICE_TAG, "Value": price}]}
            return self._instance(raw, region)
        except BaseException:
            self.terminate(instance_id)  # never leave an instance behind after raising
            raise

    def launch_fleet(self, request: FleetRequest) -> FleetResult:
        template = request.template
        refuse_reservation(self.name, ERROR_CODES.invalid_parameter, template)
        region = sdk.check_region(self.name, self._session, template.region)
        user_data = self._user_data(template)
        token = template.tags.get(TOKEN_TAG) or new_token()
        tags = self._tags(template, token)
        data = self._instance_params(template, region) | {
            "UserData": base64.b64encode(user_data.encode("utf-8")).decode("ascii")
        }
        name = f"spothop-{token}"[:128]
        made = self._call(
            region, "create_launch_template", LaunchTemplateName=name, LaunchTemplateData=data
        )
        template_id = made["LaunchTemplate"]["LaunchTemplateId"]
        try:
            answer = self._call(
                region, "create_fleet", **self._fleet_params(request, template_id, tags, token)
            )
        finally:
            self._delete_template(region, template_id)
        ids = [i for group in answer.get("Instances", []) for i in group.get("InstanceIds", [])]
        refused = [
            map_error(self.name, str(e.get("ErrorCode")), str(e.get("ErrorMessage", "")))
            for e in answer.get("Errors", [])
        ]
        for instance_id in ids:
            self._region_of[instance_id] = region
        if len(ids) < request.min_count:
            for instance_id in ids:
                self.terminate(instance_id)
            if refused:
                raise refused[0]
            raise CapacityUnavailable(
                self.name,
                ERROR_CODES.capacity_unavailable,
                f"the fleet started {len(ids)} of the {request.min_count} instances it needed",
            )
        try:
            instances = self._tag_fleet(region, ids, template, tags)
        except BaseException:
            for instance_id in ids:
                self.terminate(instance_id)
            raise
        return FleetResult(instances=instances, refused=refused)

    def _fleet_params(
        self, request: FleetRequest, template_id: str, tags: Mapping[str, str], token: str
    ) -> dict[str, Any]:
        template = request.template
        overrides = []
        for instance_type, zone in request.choices:
            override: dict[str, Any] = {"InstanceType": instance_type}
            if zone is not None:
                override["AvailabilityZone"] = zone
            if template.spot and template.max_price_usd_per_hour is not None:
                override["MaxPrice"] = number_text(template.max_price_usd_per_hour)
            overrides.append(override)
        return {
            "Type": "instant",
            "ClientToken": token[:64],
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateId": template_id,
                        "Version": "$Latest",
                    },
                    "Overrides": overrides,
                }
            ],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": request.count,
                "DefaultTargetCapacityType": "spot" if template.spot else "on-demand",
            },
            "SpotOptions": {
                "AllocationStrategy": "price-capacity-optimized",
                "InstanceInterruptionBehavior": "terminate",
            },
            "OnDemandOptions": {"AllocationStrategy": "lowest-price"},
            "TagSpecifications": [{"ResourceType": "instance", "Tags": _tag_list(tags)}],
        }

    def _tag_fleet(
        self, region: str, ids: Sequence[str], template: LaunchRequest, tags: Mapping[str, str]
    ) -> list[Instance]:
        """Give each fleet instance its node (``NODE-i``) and its price tag; return them described."""
        raws = self._describe_raw(region, ids)
        node = tags.get(NODE_TAG)
        instances = []
        for index, raw in enumerate(sorted(raws, key=lambda r: str(r["InstanceId"]))):
            zone = raw["Placement"]["AvailabilityZone"]
            extra = {
                PRICE_TAG: number_text(
                    self._price(region, zone, raw["InstanceType"], template.spot)
                )
            }
            if node:
                extra[NODE_TAG] = f"{node}-{index}"
                extra["Name"] = f"{node}-{index}"
            self._call(region, "create_tags", Resources=[raw["InstanceId"]], Tags=_tag_list(extra))
            present = {t["Key"]: t["Value"] for t in raw.get("Tags", [])} | extra
            instances.append(self._instance({**raw, "Tags": _tag_list(present)}, region))
        return instances

    def _delete_template(self, region: str, template_id: str) -> None:
        try:
            self._call(region, "delete_launch_template", LaunchTemplateId=template_id)
        except ProviderError as exc:  # a leftover template costs nothing; say so and go on
            log.warning("%s: launch template %s not deleted: %s", self.name, template_id, exc)


# SkyPilot's disk tiers as EBS volumes: gp3 at its baseline, then provisioned IOPS and
# throughput; ultra and best io2 (IOPS capped by EC2 at 500 per GiB and 64,000).
EBS_TIERS: Mapping[DiskTier, dict[str, Any]] = {
    DiskTier.LOW: {"VolumeType": "gp3"},
    DiskTier.MEDIUM: {"VolumeType": "gp3", "Iops": 6000, "Throughput": 250},
    DiskTier.HIGH: {"VolumeType": "gp3", "Iops": 16000, "Throughput": 1000},
    DiskTier.ULTRA: {"VolumeType": "io2", "Iops": 64000},
    DiskTier.BEST: {"VolumeType": "io2", "Iops": 64000},
}
IO2_IOPS_PER_GIB = 500


def ebs_volume(disk: DiskSpec) -> dict[str, Any]:
    """The ``Ebs`` of the root volume's block device mapping: size and type by tier (gp3 when
    no tier is given), deleted with the instance."""
    ebs: dict[str, Any] = {"DeleteOnTermination": True}
    ebs |= EBS_TIERS[disk.tier or DiskTier.LOW]
    if disk.size_gib is not None:
        ebs["VolumeSize"] = disk.size_gib
        if ebs["VolumeType"] == "io2":
            ebs["Iops"] = min(ebs["Iops"], IO2_IOPS_PER_GIB * disk.size_gib)
    return ebs


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _tag_specifications(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": kind, "Tags": _tag_list(tags)} for kind in ("instance", "volume")]
